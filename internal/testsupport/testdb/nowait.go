package testdb

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// NoWaitLeavesHeldKey checks, on a server database (where a writer locks one
// key row, not the whole database), core.OrderedNoWaitMarker: of a batch of
// key A's head, key B's head and an unordered event, written while a writer
// of A's next event holds A's row, MarkDoneOrderedNoWait returns at once
// with B's head and the unordered event DONE, B's next event promoted, and
// A's head returned as held and untouched; MarkDoneOrdered of the held id,
// once the writer committed, finishes it and promotes A's next event.
func NoWaitLeavesHeldKey(t *testing.T, tg Target) {
	t.Helper()
	ctx := context.Background()
	st, ok := core.StoreAs[core.OrderedStore](tg.Ordered)
	if !ok {
		t.Fatalf("%T is not ordered", tg.Ordered)
	}
	nw, ok := st.(core.OrderedNoWaitMarker)
	if !ok {
		t.Fatalf("%T does not implement core.OrderedNoWaitMarker", st)
	}
	env := func(id, aggType, key string) core.Envelope { return OrderedEnv(t, id, aggType, key) }
	const owner = "finisher"
	if _, err := st.InsertOrdered(ctx, tg.DB, []core.Envelope{env("A-1", "Order", "A"), env("B-1", "Order", "B"),
		env("B-2", "Order", "B"), env("U-1", "Unordered", "U")},
		core.InsertOptions{LeaseOwner: owner, LeaseAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tx := HoldKey(t, tg, env("A-2", "Order", "A"))
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	n, promoted, held, err := nw.MarkDoneOrderedNoWait(wctx, tg.DB, owner, []string{"A-1", "B-1", "U-1"}, time.Now())
	if err != nil {
		t.Fatalf("no-wait DONE of A-1, B-1, U-1 while A's writer is open: %v", err)
	}
	if n != 2 || !slices.Equal(held, []string{"A-1"}) || len(promoted) != 1 || promoted[0].ID() != "B-2" || promoted[0].LockedBy != owner {
		t.Fatalf("no-wait DONE of A-1, B-1, U-1: n=%d promoted=%v held=%v; want 2 marked, B-2 promoted leased by %s, A-1 held", n, promoted, held, owner)
	}
	for id, want := range map[string]core.Status{"A-1": core.StatusNew, "B-1": core.StatusDone, "U-1": core.StatusDone, "B-2": core.StatusNew} {
		if ev, err := tg.Store.Get(ctx, tg.DB, id); err != nil || ev.Status != want {
			t.Fatalf("%s after the no-wait DONE: %v, %v; want %v", id, ev.Status, err, want)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	n, promoted, err = st.MarkDoneOrdered(ctx, tg.DB, owner, held, time.Now())
	if err != nil || n != 1 || len(promoted) != 1 || promoted[0].ID() != "A-2" || promoted[0].LockedBy != owner {
		t.Fatalf("DONE of the held A-1: n=%d promoted=%v err=%v; want 1 marked and A-2 promoted, leased by %s", n, promoted, err, owner)
	}
}
