package position_test

import (
	"context"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// armedLog runs before once, at the start of the next ReadAfter after it is
// set: what commits then commits between a cycle's reads.
type armedLog struct {
	position.Log
	before func()
}

func (l *armedLog) ReadAfter(ctx context.Context, db core.DBTX, after int64, limit int) ([]position.Row, position.Token, error) {
	if b := l.before; b != nil {
		l.before = nil
		b()
	}
	return l.Log.ReadAfter(ctx, db, after, limit)
}

func keyEnv(t *testing.T, id, aggID string) core.Envelope {
	t.Helper()
	e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("T"), AggregateType: core.AggregateName("K"),
		AggregateID: aggID, JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestReaderOrderedGap: on PostgreSQL and MariaDB, an ordered event e1 left
// in a gap (a larger position committed while its transaction was open)
// commits, and then e2 of its key, both between the cycle's start and its
// read after the cursor, which returns e2: e1 is handed over first (the
// gaps are read again after that read, and the rows routed in position
// order), and e2 only once e1 is done.
func TestReaderOrderedGap(t *testing.T) {
	for _, name := range []string{"postgres", "mysql"} {
		t.Run(name, func(t *testing.T) {
			tg := testdb.Open(t, name)
			ctx := context.Background()
			inner := position.LogOf(tg.Ordered)
			if err := inner.CheckSchema(ctx, tg.DB); err != nil {
				t.Fatal(err)
			}
			lg := &armedLog{Log: inner}
			h := &handler{owner: "test-owner"}
			r, err := position.New(position.Config{SaveEvery: time.Nanosecond, Log: lg, Store: tg.Ordered, DB: tg.DB, Handler: h,
				Ordering: core.Ordering{"K": core.DeadBlocks}})
			if err != nil {
				t.Fatal(err)
			}
			st := r.Store()
			insert := func(tx *sql.Tx, envs ...core.Envelope) {
				t.Helper()
				if err := st.Insert(ctx, tx, envs, core.InsertOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			commit := func(envs ...core.Envelope) {
				t.Helper()
				tx, err := tg.DB.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				insert(tx, envs...)
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			handed := func() []string {
				t.Helper()
				if _, err := r.Cycle(ctx); err != nil {
					t.Fatal(err)
				}
				h.mu.Lock()
				defer h.mu.Unlock()
				got := h.got
				h.got = nil
				return got
			}

			tx1, err := tg.DB.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx1.Rollback() }()
			insert(tx1, keyEnv(t, "e1", "k"))
			commit(keyEnv(t, "x", "other"))
			wantIDs(t, handed(), "x") // e1's position is a gap
			lg.before = func() {
				if err := tx1.Commit(); err != nil {
					t.Error(err)
				}
				commit(keyEnv(t, "e2", "k"))
			}
			wantIDs(t, handed(), "e1")
			wantIDs(t, handed())
			for _, id := range []string{"x", "e1"} {
				if ok, err := st.MarkDone(ctx, tg.DB, r.Owner(), id, time.Now()); err != nil || !ok {
					t.Fatalf("done %s: %v, %v", id, ok, err)
				}
			}
			h.mu.Lock()
			got := slices.Clone(h.got)
			h.mu.Unlock()
			wantIDs(t, got, "e2") // handed over by e1's DONE
		})
	}
}

// TestReaderOrderedBound: with OrderedMax 2 the reader holds one key's
// head in flight and its later events in memory, reads no new rows while
// two or more wait, and hands each next event over when its predecessor is
// done; another key's event is read once the queue fell below the bound.
func TestReaderOrderedBound(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		lg := schemaLog(t, tg, tg.Ordered)
		h := &handler{owner: "test-owner"}
		r, err := position.New(position.Config{SaveEvery: time.Nanosecond, Log: lg, Store: tg.Ordered, DB: tg.DB, Handler: h,
			Ordering: core.Ordering{"K": core.DeadBlocks}, OrderedMax: 2})
		if err != nil {
			t.Fatal(err)
		}
		st := r.Store()
		write := func(id, key string) {
			t.Helper()
			if err := st.Insert(ctx, tg.DB, []core.Envelope{keyEnv(t, id, key)}, core.InsertOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		taken := func() []string {
			h.mu.Lock()
			defer h.mu.Unlock()
			got := h.got
			h.got = nil
			return got
		}
		cycle := func() []string {
			t.Helper()
			if _, err := r.Cycle(ctx); err != nil {
				t.Fatal(err)
			}
			return taken()
		}
		done := func(id string) {
			t.Helper()
			if ok, err := st.MarkDone(ctx, tg.DB, r.Owner(), id, time.Now()); err != nil || !ok {
				t.Fatalf("done %s: %v, %v", id, ok, err)
			}
		}
		for _, id := range []string{"a1", "a2", "a3", "a4"} {
			write(id, "a")
		}
		wantIDs(t, cycle(), "a1")
		write("b1", "b")
		wantIDs(t, cycle()) // three wait behind a1: no new rows
		done("a1")
		wantIDs(t, taken(), "a2")
		wantIDs(t, cycle()) // two wait
		done("a2")
		wantIDs(t, taken(), "a3")
		wantIDs(t, cycle(), "b1") // one waits: below the bound
		done("a3")
		wantIDs(t, taken(), "a4")
	})
}
