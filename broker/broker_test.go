package broker_test

import (
	"testing"
	"time"

	"github.com/outboxkit/outbox/broker"
	"github.com/outboxkit/outbox/core"
)

func event(t *testing.T, spec core.EnvelopeSpec) core.Event {
	t.Helper()
	env, err := core.NewEnvelope(spec)
	if err != nil {
		t.Fatal(err)
	}
	return core.Event{Envelope: env}
}

func TestToken(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"Order", "Order"},
		{"order-placed_v2", "order-placed_v2"},
		{"", "_"},
		{"a.b", "a_b"},
		{"a b*>", "a_b__"},
		{"héllo", "h__llo"},
	} {
		if got := broker.Token(tc.in); got != tc.want {
			t.Errorf("Token(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestName(t *testing.T) {
	ev := event(t, core.EnvelopeSpec{Type: core.EventName("Order.Placed"), AggregateType: core.AggregateName("Order"), JSON: []byte(`{}`)})
	if got := broker.Name("outbox", ev); got != "outbox.Order.Order_Placed" {
		t.Errorf("Name = %q", got)
	}
	if got := broker.Name("", ev); got != "Order.Order_Placed" {
		t.Errorf("Name without prefix = %q", got)
	}
}

func TestHeaders(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	ev := event(t, core.EnvelopeSpec{
		ID: "01J0000000000000000000000A", Type: core.EventName("OrderPlaced"),
		AggregateType: core.AggregateName("Order"), AggregateID: "o-1", TenantID: "t-1",
		OccurredAt: at, Headers: map[string]string{"trace": "abc", broker.HeaderEventID: "forged"},
		JSON: []byte(`{}`),
	})
	h := broker.Headers(ev)
	want := map[string]string{
		"trace":                    "abc",
		broker.HeaderEventID:       "01J0000000000000000000000A",
		broker.HeaderEventType:     "OrderPlaced",
		broker.HeaderAggregateType: "Order",
		broker.HeaderAggregateID:   "o-1",
		broker.HeaderTenantID:      "t-1",
		broker.HeaderOccurredAt:    "2026-01-02T03:04:05.000006Z",
	}
	if len(h) != len(want) {
		t.Errorf("headers %v, want %v", h, want)
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s = %q, want %q", k, h[k], v)
		}
	}
	bare := broker.Headers(event(t, core.EnvelopeSpec{Type: core.EventName("X"), Bytes: []byte{1}}))
	if _, ok := bare[broker.HeaderAggregateID]; ok {
		t.Error("empty aggregate id sent as a header")
	}
	if _, ok := bare[broker.HeaderTenantID]; ok {
		t.Error("empty tenant id sent as a header")
	}
}

func FuzzToken(f *testing.F) {
	f.Add("Order.Placed")
	f.Fuzz(func(t *testing.T, s string) {
		tok := broker.Token(s)
		if tok == "" {
			t.Fatal("empty token")
		}
		if broker.Token(tok) != tok {
			t.Fatalf("Token(%q) = %q is not stable", s, tok)
		}
	})
}
