package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/sqlite"
)

// seedBlocked writes key Order/K1 (three events, its head DEAD) and key
// Order/K2 (one event, NEW) through a store that orders "Order".
func seedBlocked(t *testing.T, tg target) core.OrderedStore {
	t.Helper()
	st := tg.Ordered
	if st == nil { // the SQLite target of this package: ordered store on its table
		s, err := sqlite.New(sqlite.Config{Table: tg.Table, Ordered: core.Ordering{"Order": core.DeadBlocks}})
		if err != nil {
			t.Fatal(err)
		}
		st = s
	}
	o, ok := core.StoreAs[core.OrderedStore](st)
	if !ok {
		t.Fatalf("%T is not ordered", st)
	}
	var envs []core.Envelope
	for _, k := range [][2]string{{"k1-1", "K1"}, {"k1-2", "K1"}, {"k1-3", "K1"}, {"k2-1", "K2"}} {
		e, err := core.NewEnvelope(core.EnvelopeSpec{ID: k[0], Type: core.EventName("Placed"), AggregateType: core.AggregateName("Order"),
			AggregateID: k[1], JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	if _, err := o.InsertOrdered(testCtx(t), tg.DB, envs, core.InsertOptions{LeaseOwner: "o", LeaseAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := o.MarkDeadOrdered(testCtx(t), tg.DB, "o", "k1-1", time.Now(), "boom"); err != nil || !ok {
		t.Fatalf("mark dead: %v %v", ok, err)
	}
	return o
}

func TestDeadBlockedAndSkip(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		o := seedBlocked(t, tg)

		r := tg.run(t, "dead", "blocked").want(t, exitOK)
		mustContain(t, r.stdout, "Order/K1  head=k1-1 seq=1 type=Placed waiting=2", "last_error=boom")
		r = tg.run(t, "dead", "blocked", "--json").want(t, exitOK)
		// snake_case, as stats --json and dead list --json.
		var keys []map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &keys); err != nil {
			t.Fatalf("dead blocked --json: %v\n%s", err, r.stdout)
		}
		if len(keys) != 1 || keys[0]["aggregate_type"] != "Order" || keys[0]["aggregate_id"] != "K1" ||
			keys[0]["event_id"] != "k1-1" || keys[0]["event_type"] != "Placed" || keys[0]["seq"] != 1.0 ||
			keys[0]["waiting"] != 2.0 || keys[0]["last_error"] != "boom" || keys[0]["dead_at"] == nil || len(keys[0]) != 8 {
			t.Fatalf("dead blocked --json = %s, want K1 at k1-1 with 2 waiting, in snake_case", r.stdout)
		}
		tg.run(t, "dead", "blocked", "--limit", "0").want(t, exitUsage)
		tg.run(t, "dead", "blocked", "extra").want(t, exitUsage)
		tg.run(t, "dead", "skip").want(t, exitUsage)

		// Without --yes nothing moves.
		r = tg.run(t, "dead", "skip", "k1-1").want(t, exitConfirm)
		mustContain(t, r.stdout, "would skip k1-1")
		tg.run(t, "dead", "skip", "--dry-run", "k1-1").want(t, exitOK)
		if s := status(t, tg, "k1-2"); s != "WAITING" {
			t.Fatalf("k1-2 is %s after a skip without --yes, want WAITING", s)
		}

		// k2-1 is not a DEAD head: the exit code says that one was not skipped.
		r = tg.run(t, "dead", "skip", "--yes", "k1-1", "k2-1").want(t, exitNotFound)
		mustContain(t, r.stdout, "skipped 1 of 2 (the other is not the DEAD head of a key)")
		if a, b, c := status(t, tg, "k1-1"), status(t, tg, "k1-2"), status(t, tg, "k1-3"); a != "DEAD" || b != "NEW" || c != "WAITING" {
			t.Fatalf("after skip: k1-1 %s, k1-2 %s, k1-3 %s; want DEAD, NEW, WAITING", a, b, c)
		}
		r = tg.run(t, "dead", "blocked").want(t, exitOK)
		if r.stdout != "" {
			t.Fatalf("blocked keys after the skip: %q", r.stdout)
		}
		// A second skip finds nothing to move.
		r = tg.run(t, "dead", "skip", "--yes", "k1-1").want(t, exitNotFound)
		mustContain(t, r.stdout, "skipped 0 of 1 (k1-1 is not the DEAD head of a key)")
		// A skip of every id given says no more than that.
		if ok, _, err := o.MarkDeadOrdered(testCtx(t), tg.DB, "o", "k2-1", time.Now(), "boom"); err != nil || !ok {
			t.Fatalf("mark dead: %v %v", ok, err)
		}
		r = tg.run(t, "dead", "skip", "--yes", "k2-1").want(t, exitOK)
		if want := "would skip k2-1 (it stays DEAD; the next event of its key is delivered)\nskipped 1\n"; r.stdout != want {
			t.Errorf("dead skip --yes k2-1 printed %q, want %q", r.stdout, want)
		}
	})
}
