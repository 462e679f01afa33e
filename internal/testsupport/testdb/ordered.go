package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// DoneBatchPassesHeldKey checks, on a server database (where a writer locks
// one key row, not the whole database), that a DONE batch of ordered events
// does not let a key whose row a writer holds stretch the batch: of a batch
// of key A's head and key B's, B's DONE commits while the writer of A's next
// event still holds A's row, and A's DONE, with the promotion of that next
// event, follows once the writer commits.
func DoneBatchPassesHeldKey(t *testing.T, tg Target) {
	t.Helper()
	ctx := context.Background()
	st, ok := core.StoreAs[core.OrderedStore](tg.Ordered)
	if !ok {
		t.Fatalf("%T is not ordered", tg.Ordered)
	}
	env := func(id, key string) core.Envelope {
		e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("Placed"),
			AggregateType: core.AggregateName("Order"), AggregateID: key, JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	const owner = "finisher"
	if _, err := st.InsertOrdered(ctx, tg.DB, []core.Envelope{env("A-1", "A"), env("B-1", "B")},
		core.InsertOptions{LeaseOwner: owner, LeaseAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tx, err := tg.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if res, err := st.InsertOrdered(ctx, tx, []core.Envelope{env("A-2", "A")}, core.InsertOptions{}); err != nil || len(res.Waiting) != 1 {
		t.Fatalf("write A-2: waiting %v, err %v", res.Waiting, err)
	}
	type result struct {
		n        int64
		promoted []core.Event
		err      error
	}
	done := make(chan result, 1)
	go func() {
		n, promoted, err := st.MarkDoneOrdered(ctx, tg.DB, owner, []string{"A-1", "B-1"}, time.Now())
		done <- result{n, promoted, err}
	}()
	// B-1's DONE commits while the writer of A-2 is still open.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ev, err := tg.Store.Get(ctx, tg.DB, "B-1")
		if err != nil {
			t.Fatal(err)
		}
		if ev.Status == core.StatusDone {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("mark done A-1, B-1 returned while the writer of A-2 was open: n=%d promoted=%v err=%v", r.n, r.promoted, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("B-1's DONE did not commit while the writer of key A held its row: the batch waited for A")
		}
		<-tick.C
	}
	if ev, err := tg.Store.Get(ctx, tg.DB, "A-1"); err != nil || ev.Status == core.StatusDone {
		t.Fatalf("A-1 = %v, %v: DONE before its key's writer committed", ev.Status, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.n != 2 || len(r.promoted) != 1 || r.promoted[0].ID() != "A-2" || r.promoted[0].LockedBy != owner {
		t.Fatalf("mark done A-1, B-1: n=%d promoted=%v err=%v, want 2 marked and A-2 promoted, leased by %s", r.n, r.promoted, r.err, owner)
	}
}
