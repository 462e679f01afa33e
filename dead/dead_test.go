package dead_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dead"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

var base = time.Now().UTC().Add(-time.Hour).Truncate(time.Second)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

type seedRow struct {
	id, eventType, aggType string
	status                 core.Status
}

// seed inserts rows created one second apart, in order, in the given states.
func seed(t *testing.T, tg testdb.Target, rows ...seedRow) {
	t.Helper()
	ctx := testCtx(t)
	const owner = "seeder"
	for i, r := range rows {
		env, err := core.NewEnvelope(core.EnvelopeSpec{ID: r.id, Type: core.EventName(r.eventType),
			AggregateType: core.AggregateName(r.aggType), AggregateID: "agg-" + r.id,
			OccurredAt: base.Add(time.Duration(i) * time.Second), JSON: []byte(`{"n":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		opts := core.InsertOptions{}
		if r.status != core.StatusNew {
			opts = core.InsertOptions{LeaseOwner: owner, LeaseAt: time.Now()}
		}
		if err := tg.Store.Insert(ctx, tg.DB, []core.Envelope{env}, opts); err != nil {
			t.Fatalf("insert %s: %v", r.id, err)
		}
		ok := true
		switch r.status {
		case core.StatusDone:
			ok, err = tg.Store.MarkDone(ctx, tg.DB, owner, r.id, time.Now())
		case core.StatusDead:
			ok, err = tg.Store.MarkDead(ctx, tg.DB, owner, r.id, time.Now(), "listener failed: "+r.id)
		case core.StatusRetry:
			ok, err = tg.Store.MarkRetry(ctx, tg.DB, owner, r.id, time.Now().Add(time.Hour), "try again")
		}
		if err != nil || !ok {
			t.Fatalf("seed %s: %v, %v", r.id, ok, err)
		}
	}
}

func newManager(t *testing.T, tg testdb.Target, batch int) *dead.Manager {
	t.Helper()
	m, err := dead.New(dead.Config{DB: tg.DB, Store: tg.Store, BatchSize: batch})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func ids(events []core.Event) []string {
	out := make([]string, len(events))
	for i, ev := range events {
		out[i] = ev.ID()
	}
	return out
}

func status(t *testing.T, tg testdb.Target, id string) core.Status {
	t.Helper()
	ev, err := tg.Store.Get(testCtx(t), tg.DB, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return ev.Status
}

var mixed = []seedRow{
	{"d1", "Paid", "Order", core.StatusDead},
	{"n1", "Paid", "Order", core.StatusNew},
	{"d2", "Shipped", "Order", core.StatusDead},
	{"x1", "Paid", "Order", core.StatusDone},
	{"d3", "Paid", "Invoice", core.StatusDead},
	{"r1", "Paid", "Order", core.StatusRetry},
	{"d4", "Paid", "Order", core.StatusDead},
}

func TestListAndCount(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, mixed...)
		m := newManager(t, tg, 0)
		ctx := testCtx(t)
		tests := []struct {
			name string
			f    core.DeadFilter
			want []string
		}{
			{"all", core.DeadFilter{}, []string{"d1", "d2", "d3", "d4"}},
			{"type", core.DeadFilter{EventType: "Paid"}, []string{"d1", "d3", "d4"}},
			{"aggregate", core.DeadFilter{AggregateType: "Order"}, []string{"d1", "d2", "d4"}},
			{"both", core.DeadFilter{EventType: "Paid", AggregateType: "Order"}, []string{"d1", "d4"}},
			{"limit", core.DeadFilter{Limit: 2}, []string{"d1", "d2"}},
			{"no match", core.DeadFilter{EventType: "Refunded"}, []string{}},
		}
		for _, tc := range tests {
			got, err := m.List(ctx, tc.f)
			if err != nil {
				t.Fatalf("%s: List: %v", tc.name, err)
			}
			if !slices.Equal(ids(got), tc.want) {
				t.Errorf("%s: List = %v, want %v (oldest first)", tc.name, ids(got), tc.want)
			}
			n, err := m.Count(ctx, tc.f)
			if err != nil {
				t.Fatalf("%s: Count: %v", tc.name, err)
			}
			want := int64(len(tc.want))
			if tc.name == "limit" {
				want = 4 // Count ignores the limit
			}
			if n != want {
				t.Errorf("%s: Count = %d, want %d", tc.name, n, want)
			}
		}
		got, err := m.List(ctx, core.DeadFilter{EventType: "Shipped"})
		if err != nil || len(got) != 1 {
			t.Fatalf("List Shipped = %v, %v", got, err)
		}
		ev := got[0]
		if ev.Status != core.StatusDead || ev.Attempts != 1 || ev.LastError != "listener failed: d2" ||
			ev.AggregateID() != "agg-d2" || string(ev.Payload()) != `{"n":1}` {
			t.Errorf("listed event = %+v", ev)
		}
		if _, err := m.List(ctx, core.DeadFilter{Limit: -1}); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("negative limit: %v, want core.ErrInvalid", err)
		}
	})
}

func TestReplay(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, mixed...)
		m := newManager(t, tg, 0)
		ctx := testCtx(t)
		before := time.Now().Add(-time.Second)
		ok, err := m.Replay(ctx, "d2")
		if err != nil || !ok {
			t.Fatalf("Replay d2 = %v, %v; want true", ok, err)
		}
		ev, err := tg.Store.Get(ctx, tg.DB, "d2")
		if err != nil {
			t.Fatal(err)
		}
		if ev.Status != core.StatusNew || ev.Attempts != 0 || ev.LastError != "" || ev.LockedBy != "" ||
			!ev.DoneAt.IsZero() || ev.AvailableAt.Before(before) {
			t.Errorf("replayed event = status %v attempts %d error %q locked %q done %v available %v",
				ev.Status, ev.Attempts, ev.LastError, ev.LockedBy, ev.DoneAt, ev.AvailableAt)
		}
		for _, id := range []string{"d2", "n1", "x1", "r1", "missing"} {
			ok, err := m.Replay(ctx, id)
			if err != nil || ok {
				t.Errorf("Replay %s = %v, %v; want false, nil", id, ok, err)
			}
		}
		if status(t, tg, "x1") != core.StatusDone || status(t, tg, "r1") != core.StatusRetry {
			t.Error("Replay moved a row that was not DEAD")
		}
		if _, err := m.Replay(ctx, ""); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("Replay empty id: %v, want core.ErrInvalid", err)
		}
		if n, _ := m.Count(ctx, core.DeadFilter{}); n != 3 {
			t.Errorf("Count after one replay = %d, want 3", n)
		}
	})
}

func TestReplayAllInBatches(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		var rows []seedRow
		for i := range 7 {
			rows = append(rows, seedRow{fmt.Sprintf("a%d", i), "A", "Order", core.StatusDead})
		}
		rows = append(rows, seedRow{"b0", "B", "Order", core.StatusDead}, seedRow{"b1", "B", "Order", core.StatusDead},
			seedRow{"done", "A", "Order", core.StatusDone})
		seed(t, tg, rows...)
		m := newManager(t, tg, 3)
		ctx := testCtx(t)

		var progress []int64
		n, err := m.ReplayAll(ctx, core.DeadFilter{EventType: "A"}, func(done int64) { progress = append(progress, done) })
		if err != nil || n != 7 {
			t.Fatalf("ReplayAll A = %d, %v; want 7", n, err)
		}
		if !slices.Equal(progress, []int64{3, 6, 7}) {
			t.Errorf("progress = %v, want [3 6 7]", progress)
		}
		for i := range 7 {
			if s := status(t, tg, fmt.Sprintf("a%d", i)); s != core.StatusNew {
				t.Errorf("a%d is %v after ReplayAll", i, s)
			}
		}
		if status(t, tg, "done") != core.StatusDone {
			t.Error("ReplayAll moved a DONE row")
		}

		// A limit caps the total, oldest first.
		n, err = m.ReplayAll(ctx, core.DeadFilter{Limit: 1}, nil)
		if err != nil || n != 1 {
			t.Fatalf("ReplayAll limit 1 = %d, %v", n, err)
		}
		if status(t, tg, "b0") != core.StatusNew || status(t, tg, "b1") != core.StatusDead {
			t.Error("ReplayAll with limit 1 did not replay exactly the oldest")
		}
		n, err = m.ReplayAll(ctx, core.DeadFilter{}, nil)
		if err != nil || n != 1 {
			t.Fatalf("ReplayAll rest = %d, %v; want 1", n, err)
		}
		n, err = m.ReplayAll(ctx, core.DeadFilter{}, nil)
		if err != nil || n != 0 {
			t.Fatalf("ReplayAll with nothing dead = %d, %v; want 0", n, err)
		}
	})
}

// redying kills replayed events again right away, as a dispatcher whose
// listener still fails (or is still missing) would.
type redying struct {
	core.DeadStore
	tg testdb.Target
}

func (r redying) ReplayDeadBatch(ctx context.Context, db core.DBTX, f core.DeadFilter, limit int, now time.Time) (int64, error) {
	n, err := r.DeadStore.ReplayDeadBatch(ctx, db, f, limit, now)
	if err != nil {
		return n, err
	}
	evs, _, err := r.tg.Store.Claim(ctx, db, core.ClaimParams{Owner: "killer", Now: time.Now().Add(time.Minute),
		LeaseTimeout: time.Minute, Limit: 100})
	if err != nil {
		return n, err
	}
	for _, ev := range evs {
		if _, err := r.tg.Store.MarkDead(ctx, db, "killer", ev.ID(), time.Now(), "still failing"); err != nil {
			return n, err
		}
	}
	return n, nil
}

func TestReplayAllTerminatesWhenEventsDieAgain(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, seedRow{"e0", "A", "Order", core.StatusDead}, seedRow{"e1", "A", "Order", core.StatusDead},
			seedRow{"e2", "A", "Order", core.StatusDead}, seedRow{"e3", "A", "Order", core.StatusDead})
		m, err := dead.New(dead.Config{DB: tg.DB, Store: redying{tg.Store, tg}, BatchSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		n, err := m.ReplayAll(testCtx(t), core.DeadFilter{}, nil)
		if err != nil || n != 4 {
			t.Fatalf("ReplayAll = %d, %v; want 4 (the count when it started)", n, err)
		}
	})
}

func TestErrorsAreReturned(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		seed(t, tg, seedRow{"d", "A", "Order", core.StatusDead})
		db := tg.Reopen(t)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		m, err := dead.New(dead.Config{DB: db, Store: tg.Store})
		if err != nil {
			t.Fatal(err)
		}
		ctx := testCtx(t)
		if evs, err := m.List(ctx, core.DeadFilter{}); err == nil {
			t.Errorf("List on a closed pool = %v, nil; want an error", evs)
		}
		if _, err := m.Count(ctx, core.DeadFilter{}); err == nil {
			t.Error("Count on a closed pool: no error")
		}
		if _, err := m.Replay(ctx, "d"); err == nil {
			t.Error("Replay on a closed pool: no error")
		}
		if _, err := m.ReplayAll(ctx, core.DeadFilter{Limit: 5}, nil); err == nil {
			t.Error("ReplayAll on a closed pool: no error")
		}
	})
}

func TestConfig(t *testing.T) {
	tg := testdb.SQLite(t)
	for name, cfg := range map[string]dead.Config{
		"nil db":         {Store: tg.Store},
		"nil store":      {DB: tg.DB},
		"negative batch": {DB: tg.DB, Store: tg.Store, BatchSize: -1},
	} {
		if _, err := dead.New(cfg); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("%s: New = %v, want core.ErrInvalid", name, err)
		}
	}
}

// TestBlockedKeysAndSkip: a DEAD ordered head shows as a blocked key; Skip
// moves the key on, and the next event becomes claimable.
func TestBlockedKeysAndSkip(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		ctx := testCtx(t)
		st := tg.Ordered
		var envs []core.Envelope
		for i := range 3 {
			e, err := core.NewEnvelope(core.EnvelopeSpec{ID: fmt.Sprintf("o-%d", i+1), Type: core.EventName("T"),
				AggregateType: core.AggregateName("Order"), AggregateID: "A", OccurredAt: base, JSON: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, e)
		}
		if err := st.Insert(ctx, tg.DB, envs, core.InsertOptions{LeaseOwner: "w", LeaseAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if ok, err := st.MarkDead(ctx, tg.DB, "w", "o-1", time.Now(), "poison"); err != nil || !ok {
			t.Fatalf("mark dead: %v %v", ok, err)
		}
		m, err := dead.New(dead.Config{DB: tg.DB, Store: st})
		if err != nil {
			t.Fatal(err)
		}
		keys, err := m.BlockedKeys(ctx, core.DeadFilter{})
		if err != nil || len(keys) != 1 || keys[0].AggregateID != "A" || keys[0].Waiting != 2 {
			t.Fatalf("blocked keys: %+v %v", keys, err)
		}
		if n, err := m.Skip(ctx, "o-1"); err != nil || n != 1 {
			t.Fatalf("skip: %d %v", n, err)
		}
		if keys, err := m.BlockedKeys(ctx, core.DeadFilter{}); err != nil || len(keys) != 0 {
			t.Fatalf("blocked keys after skip: %+v %v", keys, err)
		}
		evs, _, err := st.Claim(ctx, tg.DB, core.ClaimParams{Owner: "c", Now: time.Now().Add(time.Second), LeaseTimeout: time.Minute, Limit: 10})
		if err != nil || len(evs) != 1 || evs[0].ID() != "o-2" {
			t.Fatalf("claim after skip: %d events %v", len(evs), err)
		}
		if _, err := m.Skip(ctx, ""); !errors.Is(err, core.ErrInvalid) {
			t.Fatalf("skip of an empty id: %v, want core.ErrInvalid", err)
		}
	})
}
