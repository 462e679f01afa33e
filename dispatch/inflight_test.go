package dispatch

import (
	"sync"
	"testing"
	"time"

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
	q := make(chan item, 1)
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
	q := make(chan item, 2)
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
	q := make(chan item)
	var wg sync.WaitGroup
	const n = 1000
	wg.Go(func() {
		for range n {
			ev := (<-q).ev
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

// A claim made before an outcome landed but offered after its entry left is
// refused as stale when the lease had expired (renewal off or failing); a
// later claim of the same id (a RETRY that fell due) is accepted.
func TestInflightStaleClaimRefused(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := newInflight()
	f.lease, f.now = time.Second, func() time.Time { return now }
	q := make(chan item, 2)
	ev := eventWithID(t, "a")
	ev.LockedBy, ev.LockedAt = "me", now
	if f.offer(q, ev) != queued {
		t.Fatal("first offer not queued")
	}
	e := (<-q).e
	f.begin(e, nil)
	now = now.Add(2 * time.Second) // the delivery outlived the lease
	stale := ev
	stale.LockedAt = now // this dispatcher's poller claimed it again...
	if got := f.offer(q, stale); got != held {
		t.Fatalf("claim while in flight = %v, want held", got)
	}
	if !f.writing(e, finishing) {
		t.Fatal("entry not writable")
	}
	now = now.Add(time.Millisecond)
	f.done(e) // ...then DONE landed, and only then is the claim handed over
	if got := f.offer(q, stale); got != refused || len(q) != 0 {
		t.Fatalf("stale claim after the outcome = %v, want refused", got)
	}
	later := ev
	later.LockedAt = now.Add(time.Second)
	if got := f.offer(q, later); got != queued {
		t.Fatalf("later claim = %v, want queued", got)
	}
}

// An entry whose RETRY is being written is replaced by a new claim: the
// RETRY landed and this dispatcher's poller claimed the row when it fell
// due; the old write no longer finds its entry current.
func TestInflightReopeningReplaced(t *testing.T) {
	t.Parallel()
	f := newInflight()
	q := make(chan item, 2)
	ev := eventWithID(t, "a")
	f.offer(q, ev)
	e := (<-q).e
	f.begin(e, nil)
	f.writing(e, reopening)
	if got := f.offer(q, ev); got != queued {
		t.Fatalf("claim of a reopening entry = %v, want queued", got)
	}
	if f.current(e) {
		t.Error("replaced entry still current")
	}
	f.done(e) // the old write lands: the new entry stays
	if !f.held("a") {
		t.Error("new entry untracked by the old write")
	}
}
