package core_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/outboxkit/outbox/core"
)

func TestRegistry(t *testing.T) {
	var r core.Registry
	noop := func(context.Context, core.Event) error { return nil }
	if err := r.RegisterFunc(core.AggregateName("Order"), orderPlaced, noop); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterFunc(nil, orderPlaced, noop); err != nil {
		t.Fatalf("same event type under Global: %v", err)
	}
	if err := r.RegisterFunc(core.AggregateName("Order"), orderPlaced, noop); !errors.Is(err, core.ErrDuplicateListener) {
		t.Fatalf("duplicate: %v", err)
	}
	if err := r.RegisterFunc(core.Global, orderPlaced, noop); !errors.Is(err, core.ErrDuplicateListener) {
		t.Fatalf("duplicate under explicit Global: %v", err)
	}
	if err := r.Register(nil, core.EventName(""), core.ListenerFunc(noop)); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("empty type: %v", err)
	}
	if err := r.Register(nil, core.EventName("   "), core.ListenerFunc(noop)); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("whitespace-only event type: %v", err)
	}
	if err := r.Register(core.AggregateName(" \t"), orderPlaced, core.ListenerFunc(noop)); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("whitespace-only aggregate type: %v", err)
	}
	if err := r.Register(nil, orderPlaced, nil); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("nil listener: %v", err)
	}
	if _, ok := r.Lookup("Order", "OrderPlaced"); !ok {
		t.Error("Order/OrderPlaced not found")
	}
	if _, ok := r.Lookup(core.GlobalAggregateName, "OrderPlaced"); !ok {
		t.Error("Global/OrderPlaced not found")
	}
	if _, ok := r.Lookup("User", "OrderPlaced"); ok {
		t.Error("User/OrderPlaced found")
	}
}

func TestRegistryConcurrentUse(t *testing.T) {
	r := core.NewRegistry()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_ = r.RegisterFunc(core.AggregateName(string(rune('A'+i))), orderPlaced, func(context.Context, core.Event) error { return nil })
			r.Lookup("A", "OrderPlaced")
		})
	}
	wg.Wait()
	for i := range 8 {
		if _, ok := r.Lookup(string(rune('A'+i)), "OrderPlaced"); !ok {
			t.Errorf("listener %d missing", i)
		}
	}
}

func TestRegistryFallback(t *testing.T) {
	var r core.Registry
	own := core.ListenerFunc(func(context.Context, core.Event) error { return errors.New("own") })
	all := core.ListenerFunc(func(context.Context, core.Event) error { return errors.New("fallback") })
	if err := r.RegisterFallback(nil); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("nil fallback: %v", err)
	}
	if err := r.Register(core.AggregateName("Order"), orderPlaced, own); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterFallback(all); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterFallback(all); !errors.Is(err, core.ErrDuplicateListener) {
		t.Fatalf("second fallback: %v", err)
	}
	for _, tc := range []struct{ agg, typ, want string }{
		{"Order", "OrderPlaced", "own"},
		{"Order", "OrderShipped", "fallback"},
		{"User", "UserCreated", "fallback"},
	} {
		l, ok := r.Lookup(tc.agg, tc.typ)
		if !ok {
			t.Fatalf("%s/%s: not found", tc.agg, tc.typ)
		}
		if got := l.Handle(context.Background(), core.Event{}).Error(); got != tc.want {
			t.Errorf("%s/%s: listener %q, want %q", tc.agg, tc.typ, got, tc.want)
		}
	}
}
