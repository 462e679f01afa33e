package core

import (
	"context"
	"fmt"
	"strings"
	"sync"
)

// Listener handles the events of one (aggregate type, event type). Returning
// nil marks the event DONE; an error schedules a retry (see RetryAfter) or, with
// Permanent, marks it DEAD. A panic counts as an error. Delivery is
// at-least-once: a listener must tolerate seeing the same event ID twice.
type Listener interface {
	Handle(ctx context.Context, ev Event) error
}

// AsyncListener is the optional capability of a Listener that declares
// itself asynchronous: each Handle hands the event to a remote system and
// spends its time waiting for the acknowledgement (a broker publisher), not
// on the CPU, so that many calls can usefully run at once. The dispatcher
// finds it on the registered listeners: when its Workers is left zero, it
// runs as many workers as the largest InFlight among them (at least its
// default), so that such a listener reaches the remote system's pace
// without tuning. A wrapper that adds behaviour around such a listener
// should implement InFlight too, or the dispatcher keeps its default.
type AsyncListener interface {
	Listener
	// InFlight returns how many Handle calls the listener wants running
	// at once.
	InFlight() int
}

// BatchListener is the optional capability of a Listener that delivers
// several events in one call (a broker publisher that sends them back to
// back and waits for their acknowledgements together). When a worker takes
// an event whose listener is a BatchListener, it takes the queued events of
// the same listener with it, up to MaxBatch, and calls HandleBatch once:
// one call costs the process far less than one Handle per event, each in
// its own worker. HandleBatch returns one error per event, in order (nil:
// delivered); each outcome is recorded as Handle's would be. A panic fails
// every event of the batch, and so does a lease found lost during the call:
// the batch shares one context, which it cancels. Events of one ordered key
// are never in one batch. The dispatcher calls Handle, not HandleBatch,
// when it runs interceptors, which wrap one event each. A wrapper that adds
// behaviour around such a listener should implement HandleBatch too, or the
// dispatcher calls Handle.
type BatchListener interface {
	Listener
	// MaxBatch returns the most events HandleBatch takes at once.
	MaxBatch() int
	// HandleBatch delivers evs and returns their outcomes: errs[i] is
	// evs[i]'s. len(errs) must be len(evs).
	HandleBatch(ctx context.Context, evs []Event) (errs []error)
}

// ListenerFunc adapts a function to Listener.
type ListenerFunc func(ctx context.Context, ev Event) error

// Handle calls f.
func (f ListenerFunc) Handle(ctx context.Context, ev Event) error { return f(ctx, ev) }

type routeKey struct{ aggregate, event string }

// Registry routes events to their listener: exactly one per
// (aggregate type, event type). The zero value is empty and ready; it is safe
// for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	routes   map[routeKey]Listener
	fallback Listener
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

// Register adds the listener for (aggregate, event). A nil aggregate means
// Global. It returns an error matching ErrDuplicateListener if the pair already
// has one, or ErrInvalid for an empty name or a nil listener.
func (r *Registry) Register(aggregate AggregateType, event EventType, l Listener) error {
	aggName := GlobalAggregateName
	if aggregate != nil && aggregate.Name() != "" {
		aggName = aggregate.Name()
	}
	if event == nil || event.Name() == "" {
		return Invalid("event type", "is empty")
	}
	// Names the writer rejects can never be routed to; say so at Register
	// rather than leave a listener nothing reaches.
	if strings.TrimSpace(event.Name()) == "" {
		return Invalid("event type", "is only whitespace")
	}
	if strings.TrimSpace(aggName) == "" {
		return Invalid("aggregate type", "is only whitespace")
	}
	if l == nil {
		return Invalid("listener", "is nil")
	}
	key := routeKey{aggName, event.Name()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.routes[key]; dup {
		return fmt.Errorf("register (%s, %s): %w", key.aggregate, key.event, ErrDuplicateListener)
	}
	if r.routes == nil {
		r.routes = make(map[routeKey]Listener)
	}
	r.routes[key] = l
	return nil
}

// RegisterFunc is Register for a function.
func (r *Registry) RegisterFunc(aggregate AggregateType, event EventType, f func(context.Context, Event) error) error {
	if f == nil {
		return Invalid("listener", "is nil")
	}
	return r.Register(aggregate, event, ListenerFunc(f))
}

// RegisterFallback sets the listener of every (aggregate type, event type)
// that has none of its own: one route for many pairs, such as a publisher
// that forwards every event to a broker. Pairs registered with Register keep
// their own listener. It returns an error matching ErrDuplicateListener if a
// fallback is already set, or ErrInvalid for a nil listener.
func (r *Registry) RegisterFallback(l Listener) error {
	if l == nil {
		return Invalid("listener", "is nil")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fallback != nil {
		return fmt.Errorf("register fallback: %w", ErrDuplicateListener)
	}
	r.fallback = l
	return nil
}

// Listeners returns every registered listener, the fallback included, in no
// particular order; a listener registered for several pairs appears once
// per pair.
func (r *Registry) Listeners() []Listener {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Listener, 0, len(r.routes)+1)
	for _, l := range r.routes {
		out = append(out, l)
	}
	if r.fallback != nil {
		out = append(out, r.fallback)
	}
	return out
}

// Lookup returns the listener for (aggregateType, eventType), the fallback
// when the pair has none, or false when there is neither.
func (r *Registry) Lookup(aggregateType, eventType string) (Listener, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if l, ok := r.routes[routeKey{aggregateType, eventType}]; ok {
		return l, true
	}
	return r.fallback, r.fallback != nil
}
