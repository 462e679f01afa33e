package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// statsTests check the statistics for operations tooling (core.Inspector).
var statsTests = []test{
	{"Stats", testStats},
	{"CountByType", testCountByType},
}

func testStats(t *testing.T, tg Target) {
	insp, ok := core.StoreAs[core.Inspector](tg.Store)
	if !ok {
		t.Fatalf("%T does not implement core.Inspector", tg.Store)
	}
	c := ctx(t)
	empty, err := insp.Stats(c, tg.DB)
	if err != nil || empty != (core.Stats{}) {
		t.Fatalf("empty table: %+v, %v", empty, err)
	}
	seq(t, tg, "st", 6) // created base+0ms ... base+5ms
	now := time.Now()
	claim(t, tg, tg.DB, owner, now, 4)
	old := now.Add(-48 * time.Hour)
	mustMark(t)(tg.Store.MarkDone(c, tg.DB, owner, "st-00000", old))
	mustMark(t)(tg.Store.MarkDone(c, tg.DB, owner, "st-00001", now))
	mustMark(t)(tg.Store.MarkDead(c, tg.DB, owner, "st-00002", old, "x"))
	mustMark(t)(tg.Store.MarkRetry(c, tg.DB, owner, "st-00003", now.Add(time.Hour), "x"))
	// Now: DONE 0 (old), 1; DEAD 2 (old); RETRY 3; NEW 4, 5.
	st, err := insp.Stats(c, tg.DB)
	if err != nil {
		t.Fatal(err)
	}
	want := core.Stats{New: 2, Retry: 1, Dead: 1, Done: 2, OldestPending: base.Add(3 * time.Millisecond)}
	if st != want {
		t.Fatalf("stats = %+v, want %+v", st, want)
	}
	claim(t, tg, tg.DB, owner, now, 1)
	if st, _ := insp.Stats(c, tg.DB); st.Leased != 1 {
		t.Fatalf("leased = %d, want 1", st.Leased)
	}
	cutoff := now.Add(-24 * time.Hour)
	done, dead, err := insp.CountPurgeable(c, tg.DB, core.PurgeParams{DoneBefore: cutoff, DeadBefore: cutoff, Limit: 1})
	if err != nil || done != 1 || dead != 1 {
		t.Fatalf("purgeable = %d done, %d dead (%v), want 1, 1", done, dead, err)
	}
	if done, dead, _ := insp.CountPurgeable(c, tg.DB, core.PurgeParams{DoneBefore: now.Add(time.Minute)}); done != 2 || dead != 0 {
		t.Fatalf("purgeable keeping DEAD = %d, %d, want 2, 0", done, dead)
	}
}

func testCountByType(t *testing.T, tg Target) {
	insp, ok := core.StoreAs[core.Inspector](tg.Store)
	if !ok {
		t.Fatalf("%T does not implement core.Inspector", tg.Store)
	}
	c := ctx(t)
	if got, err := insp.CountByType(c, tg.DB); err != nil || len(got) != 0 {
		t.Fatalf("empty table: %+v, %v", got, err)
	}
	typed := func(agg, typ string) func(*core.EnvelopeSpec) {
		return func(s *core.EnvelopeSpec) {
			s.AggregateType, s.Type = core.AggregateName(agg), core.EventName(typ)
		}
	}
	// Inserted in claim order: the first four are claimed and marked.
	insert(t, tg,
		env(t, "bt-0", base, typed("Order", "Paid")),
		env(t, "bt-1", base.Add(1*time.Millisecond), typed("Order", "Paid")),
		env(t, "bt-2", base.Add(2*time.Millisecond), typed("Invoice", "Sent")),
		env(t, "bt-3", base.Add(3*time.Millisecond), typed("Order", "Shipped")),
		env(t, "bt-4", base.Add(4*time.Millisecond), typed("Order", "Paid")),
		env(t, "bt-5", base.Add(5*time.Millisecond), typed("Invoice", "Sent")),
	)
	now := time.Now()
	claim(t, tg, tg.DB, owner, now, 4)
	mustMark(t)(tg.Store.MarkDead(c, tg.DB, owner, "bt-0", now, "x"))
	mustMark(t)(tg.Store.MarkRetry(c, tg.DB, owner, "bt-1", now.Add(time.Hour), "x"))
	mustMark(t)(tg.Store.MarkDone(c, tg.DB, owner, "bt-2", now))
	mustMark(t)(tg.Store.MarkDone(c, tg.DB, owner, "bt-3", now))
	// Order/Paid: DEAD, RETRY, NEW (4); Invoice/Sent: DONE, NEW (5);
	// Order/Shipped: DONE only, so it does not appear.
	got, err := insp.CountByType(c, tg.DB)
	if err != nil {
		t.Fatal(err)
	}
	want := []core.TypeCount{
		{AggregateType: "Invoice", EventType: "Sent", New: 1},
		{AggregateType: "Order", EventType: "Paid", New: 1, Retry: 1, Dead: 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("CountByType = %+v, want %+v", got, want)
	}
}
