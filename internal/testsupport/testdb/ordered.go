package testdb

import (
	"context"
	"fmt"
	"strings"
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
	env := func(id, key string) core.Envelope { return OrderedEnv(t, id, "Order", key) }
	const owner = "finisher"
	if _, err := st.InsertOrdered(ctx, tg.DB, []core.Envelope{env("A-1", "A"), env("B-1", "B")},
		core.InsertOptions{LeaseOwner: owner, LeaseAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tx := HoldKey(t, tg, env("A-2", "A"))
	// B-1's DONE commits while the writer of A-2 is still open.
	wait := MarkDoneWhileHeld(t, tg, st, owner, []string{"A-1", "B-1"}, "the writer of A-2 was open", "B-1", core.StatusDone)
	if ev, err := tg.Store.Get(ctx, tg.DB, "A-1"); err != nil || ev.Status == core.StatusDone {
		t.Fatalf("A-1 = %v, %v: DONE before its key's writer committed", ev.Status, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := wait()
	if r.Err != nil || r.N != 2 || len(r.Promoted) != 1 || r.Promoted[0].ID() != "A-2" || r.Promoted[0].LockedBy != owner {
		t.Fatalf("mark done A-1, B-1: n=%d promoted=%v err=%v, want 2 marked and A-2 promoted, leased by %s", r.N, r.Promoted, r.Err, owner)
	}
}

// DoneResult is what a MarkDoneOrdered call returned.
type DoneResult struct {
	N        int64
	Promoted []core.Event
	Err      error
}

// MarkDoneWhileHeld runs st.MarkDoneOrdered of ids on tg.DB while the
// caller holds a row that the call needs (held says which, for the
// messages), and waits until event id has status want: the call must get
// that far without the held row. It fails the test if the call returns
// first, or if id is not at want within 30 s. It returns the wait for the
// call's result, to call once the caller has released the row; the wait
// fails the test after 30 s.
func MarkDoneWhileHeld(t *testing.T, tg Target, st core.OrderedStore, owner string, ids []string, held, id string, want core.Status) (wait func() DoneResult) {
	t.Helper()
	ctx := context.Background()
	call := fmt.Sprintf("mark done %s", strings.Join(ids, ", "))
	done := make(chan DoneResult, 1)
	go func() {
		n, promoted, err := st.MarkDoneOrdered(ctx, tg.DB, owner, ids, time.Now())
		done <- DoneResult{n, promoted, err}
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ev, err := tg.Store.Get(ctx, tg.DB, id)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Status == want {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("%s returned while %s: n=%d promoted=%v err=%v", call, held, r.N, r.Promoted, r.Err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s was %v, not %v, 30 s on while %s", call, id, ev.Status, want, held)
		}
		<-tick.C
	}
	return func() DoneResult {
		t.Helper()
		select {
		case r := <-done:
			return r
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not return once the held row was released", call)
			return DoneResult{}
		}
	}
}
