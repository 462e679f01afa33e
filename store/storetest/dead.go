package storetest

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// deadTests check dead events: query, count, replay (core.DeadStore).
var deadTests = []test{
	{"DeadQueryCountReplay", testDead},
	{"DeadReplayAllInBatches", testDeadReplayAll},
}

func deadRows(t testing.TB, tg Target, prefix string, n int, mod func(i int, s *core.EnvelopeSpec)) []string {
	t.Helper()
	envs := make([]core.Envelope, n)
	out := make([]string, n)
	for i := range n {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
		envs[i] = env(t, out[i], base.Add(time.Duration(i)*time.Millisecond), func(s *core.EnvelopeSpec) {
			if mod != nil {
				mod(i, s)
			}
		})
	}
	insert(t, tg, envs...)
	now := time.Now()
	evs := claim(t, tg, tg.DB, owner, now, n)
	for _, e := range evs {
		mustMark(t)(tg.Store.MarkDead(ctx(t), tg.DB, owner, e.ID(), now, "died"))
	}
	return out
}

func testDead(t *testing.T, tg Target) {
	c := ctx(t)
	dead := deadRows(t, tg, "dead", 6, func(i int, s *core.EnvelopeSpec) {
		if i%2 == 1 {
			s.Type = core.EventName("Other")
		}
		if i >= 4 {
			s.AggregateType = core.AggregateName("Order")
		}
	})
	seq(t, tg, "alive", 2)
	all, err := tg.Store.QueryDead(c, tg.DB, core.DeadFilter{})
	if err != nil || !slices.Equal(ids(all), dead) {
		t.Fatalf("query dead = %v (%v), want %v", ids(all), err, dead)
	}
	if all[0].LastError != "died" || all[0].Status != core.StatusDead {
		t.Errorf("dead row: %+v", all[0])
	}
	other, _ := tg.Store.QueryDead(c, tg.DB, core.DeadFilter{EventType: "Other", Limit: 2})
	if !slices.Equal(ids(other), []string{"dead-001", "dead-003"}) {
		t.Errorf("filtered+limited = %v", ids(other))
	}
	orders, _ := tg.Store.QueryDead(c, tg.DB, core.DeadFilter{AggregateType: "Order", EventType: "Tested"})
	if !slices.Equal(ids(orders), []string{"dead-004"}) {
		t.Errorf("by aggregate and type = %v", ids(orders))
	}
	for f, want := range map[core.DeadFilter]int64{{}: 6, {EventType: "Other"}: 3, {AggregateType: "Order"}: 2, {EventType: "None"}: 0} {
		if n, err := tg.Store.CountDead(c, tg.DB, f); err != nil || n != want {
			t.Errorf("count %+v = %d (%v), want %d", f, n, err, want)
		}
	}
	now := time.Now()
	n, err := tg.Store.ReplayDead(c, tg.DB, []string{"dead-000", "alive-00000", "missing"}, now)
	if err != nil || n != 1 {
		t.Fatalf("replay: n=%d err=%v, want 1", n, err)
	}
	ev := get(t, tg, "dead-000")
	if ev.Status != core.StatusNew || ev.Attempts != 0 || ev.LastError != "" || !ev.DoneAt.IsZero() {
		t.Fatalf("replayed row: %+v", ev)
	}
	if alive := get(t, tg, "alive-00000"); alive.Status != core.StatusNew {
		t.Fatalf("replay touched a live row: %+v", alive)
	}
	got := claim(t, tg, tg.DB, owner, now, 10)
	if !slices.Contains(ids(got), "dead-000") {
		t.Fatalf("replayed event not claimable: %v", ids(got))
	}
}

func testDeadReplayAll(t *testing.T, tg Target) {
	c := ctx(t)
	deadRows(t, tg, "ra", 7, func(i int, s *core.EnvelopeSpec) {
		if i == 6 {
			s.Type = core.EventName("Kept")
		}
	})
	now := time.Now()
	var total int64
	for {
		n, err := tg.Store.ReplayDeadBatch(c, tg.DB, core.DeadFilter{EventType: "Tested"}, 4, now)
		if err != nil {
			t.Fatal(err)
		}
		if n > 4 {
			t.Fatalf("batch replayed %d > 4", n)
		}
		total += n
		if n < 4 {
			break
		}
	}
	if total != 6 {
		t.Fatalf("replayed %d, want 6", total)
	}
	if n, _ := tg.Store.CountDead(c, tg.DB, core.DeadFilter{}); n != 1 {
		t.Fatalf("dead left = %d, want 1 (the filtered-out one)", n)
	}
	if _, err := tg.Store.ReplayDeadBatch(c, tg.DB, core.DeadFilter{}, 0, now); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("batch 0: err = %v", err)
	}
}
