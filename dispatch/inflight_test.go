package dispatch

import (
	"sync"
	"testing"

	"github.com/outboxkit/outbox/core"
)

func eventWithID(t *testing.T, id string) core.Event {
	t.Helper()
	env, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("T"), AggregateType: core.AggregateName("A"), JSON: []byte(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	return core.Event{Envelope: env}
}

func TestInflightOffer(t *testing.T) {
	t.Parallel()
	f := newInflight()
	q := make(chan core.Event, 1)
	a, b := eventWithID(t, "a"), eventWithID(t, "b")
	if got := f.offer(q, a); got != queued || !f.held("a") {
		t.Fatalf("offer(a) = %v, held %v; want queued and held", got, f.held("a"))
	}
	if got := f.offer(q, a); got != held {
		t.Errorf("second offer(a) = %v, want held", got)
	}
	if got := f.offer(q, b); got != refused || f.held("b") {
		t.Errorf("offer(b) to a full queue = %v, held %v; want refused, not held", got, f.held("b"))
	}
	<-q
	f.untrack("a")
	if f.held("a") {
		t.Error("a held after untrack")
	}
	f.stopIntake()
	if got := f.offer(q, b); got != refused || !f.intakeStopped() {
		t.Errorf("offer(b) after stopIntake = %v, want refused", got)
	}
	if len(q) != 0 {
		t.Error("an event entered the queue after stopIntake")
	}
}

func TestInflightHeldAfterStopIntake(t *testing.T) {
	t.Parallel()
	f := newInflight()
	q := make(chan core.Event, 2)
	f.offer(q, eventWithID(t, "a"))
	f.offer(q, eventWithID(t, "b"))
	f.stopIntake()
	// A held id is reported held while closing, so that the poller does
	// not release a lease the dispatcher still holds.
	if got := f.offer(q, eventWithID(t, "a")); got != held {
		t.Errorf("offer of a held id after stopIntake = %v, want held", got)
	}
	f.untrackAll([]string{"a", "b"})
	if f.held("a") || f.held("b") {
		t.Error("ids held after untrackAll")
	}
}

// A worker that takes an event from the queue always finds its id tracked:
// offer tracks it under the same lock as the send.
func TestInflightTrackedBeforeTaken(t *testing.T) {
	t.Parallel()
	f := newInflight()
	q := make(chan core.Event)
	var wg sync.WaitGroup
	const n = 1000
	wg.Go(func() {
		for range n {
			ev := <-q
			if !f.held(ev.ID()) {
				t.Errorf("%s taken from the queue before it was tracked", ev.ID())
			}
			f.untrack(ev.ID())
		}
	})
	ev := eventWithID(t, "x")
	for sent := 0; sent < n; {
		if f.offer(q, ev) == queued {
			sent++
		}
	}
	wg.Wait()
}
