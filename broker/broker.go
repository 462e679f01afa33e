// Package broker holds what the broker publishers of this repository share:
// the headers that carry an event's envelope to a broker, and the rule that
// turns aggregate and event types into subject, routing-key or topic names.
//
// The publishers themselves live in nested modules, so that their clients
// are downloaded only by those who use them:
//
//	github.com/outboxkit/outbox/broker/jetstream  NATS JetStream (nats.go)
//	github.com/outboxkit/outbox/broker/rabbitmq   RabbitMQ (amqp091-go)
//	github.com/outboxkit/outbox/broker/kafka      Kafka (franz-go)
//
// Each publisher is a core.Listener that reports success only after the
// broker acknowledged the message, and sends the event id as the broker's
// deduplication key. This package depends on core alone.
package broker

import (
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

// DefaultInFlight is how many publishes each publisher asks to have in
// flight at once (its InFlight method, core.AsyncListener): a dispatcher
// whose Workers is left zero runs that many workers, so that a backlog
// drains at the broker's pace and live events do not queue behind each
// other's acknowledgements. Set dispatch.Config.Workers to choose another
// number.
const DefaultInFlight = 256

// Headers every publisher sets on a message, beside the event's own headers.
// The consumer helpers read the event id from HeaderEventID when the broker
// has no field of its own for it.
const (
	HeaderEventID       = "Outbox-Event-Id"
	HeaderEventType     = "Outbox-Event-Type"
	HeaderAggregateType = "Outbox-Aggregate-Type"
	HeaderAggregateID   = "Outbox-Aggregate-Id"
	HeaderTenantID      = "Outbox-Tenant-Id"
	HeaderOccurredAt    = "Outbox-Occurred-At" // RFC 3339 with nanoseconds, UTC
)

// Headers returns the headers of the message that carries ev: the event's
// own headers, then the Outbox-* headers, which win over an event header of
// the same name so that a consumer can trust them. Empty aggregate and tenant
// ids are left out.
func Headers(ev core.Event) map[string]string {
	h := ev.Headers()
	if h == nil {
		h = make(map[string]string, 6)
	}
	h[HeaderEventID] = ev.ID()
	h[HeaderEventType] = ev.Type()
	h[HeaderAggregateType] = ev.AggregateType()
	if id := ev.AggregateID(); id != "" {
		h[HeaderAggregateID] = id
	}
	if id := ev.TenantID(); id != "" {
		h[HeaderTenantID] = id
	}
	h[HeaderOccurredAt] = ev.OccurredAt().UTC().Format(time.RFC3339Nano)
	return h
}

// Token returns s as one token of a subject, routing key or topic name:
// letters, digits, '-' and '_' are kept, every other byte (a '.', which
// separates tokens, a space, NATS's wildcards '*' and '>', non-ASCII) becomes
// '_'. An empty s becomes "_". The names of the default rule are
// prefix.Token(aggregate type).Token(event type), which every broker here
// accepts.
func Token(s string) string {
	if s == "" {
		return "_"
	}
	ok := true
	for i := 0; i < len(s); i++ {
		if !tokenByte(s[i]) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if tokenByte(s[i]) {
			b.WriteByte(s[i])
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

// Name returns the default subject, routing key or topic of ev:
// prefix.Token(aggregate type).Token(event type), or without the prefix and
// its dot when prefix is empty.
func Name(prefix string, ev core.Event) string {
	agg, typ := Token(ev.AggregateType()), Token(ev.Type())
	if prefix == "" {
		return agg + "." + typ
	}
	return prefix + "." + agg + "." + typ // one allocation per name
}
