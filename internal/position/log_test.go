package position_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/sqlite"
)

// unwrapping is a wrapper that hides the store's methods but unwraps to it.
type unwrapping struct{ core.Store }

func (w unwrapping) Unwrap() core.Store { return w.Store }

// TestLogOf: the stores' position log, unexported, is found on the store
// itself, on a type that embeds it and through a wrapper that unwraps to it.
func TestLogOf(t *testing.T) {
	st, err := sqlite.New(sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	type embedding struct{ *sqlite.Store }
	for name, s := range map[string]core.Store{
		"store":     st,
		"embedding": embedding{st},
		"wrapper":   unwrapping{st},
	} {
		if position.LogOf(s) == nil {
			t.Errorf("%s: no position log", name)
		}
	}
	if lg := position.LogOf(unwrapping{}); lg != nil {
		t.Errorf("a wrapper of nothing has a position log: %T", lg)
	}
}

// TestInsertStreamRoundTrip: every shape of a single-event write (with and
// without aggregate id, tenant id and headers; JSON and bytes payloads) and
// a write of several events come back from a read as written, STREAM, at
// the positions the writes returned, in the order they were written.
func TestInsertStreamRoundTrip(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		lg := schemaLog(t, tg, tg.Store)
		at := time.Date(2026, 1, 2, 3, 4, 5, 678901000, time.UTC)
		var specs []core.EnvelopeSpec
		for shape := range 8 {
			s := core.EnvelopeSpec{ID: fmt.Sprintf("one-%d", shape), Type: core.EventName("T"),
				AggregateType: core.AggregateName("A"), OccurredAt: at, JSON: []byte(`{"n":1}`)}
			if shape&1 != 0 {
				s.AggregateID = "agg-1"
			}
			if shape&2 != 0 {
				s.TenantID = "tenant-1"
			}
			if shape&4 != 0 {
				s.Headers = map[string]string{"k": "v"}
				s.JSON, s.Bytes = nil, []byte{0, 1, 2, 0xff}
			}
			specs = append(specs, s)
		}
		for i := range 3 {
			specs = append(specs, core.EnvelopeSpec{ID: fmt.Sprintf("many-%d", i), Type: core.EventName("T"),
				AggregateID: fmt.Sprintf("agg-%d", i), OccurredAt: at, JSON: []byte(`{}`)})
		}
		envs := make([]core.Envelope, len(specs))
		for i, s := range specs {
			e, err := core.NewEnvelope(s)
			if err != nil {
				t.Fatal(err)
			}
			envs[i] = e
		}
		var want []int64
		for _, e := range envs[:8] {
			pos, err := lg.InsertStream(ctx, tg.DB, []core.Envelope{e})
			if err != nil {
				t.Fatalf("insert %s: %v", e.ID(), err)
			}
			want = append(want, pos...)
		}
		pos, err := lg.InsertStream(ctx, tg.DB, envs[8:])
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, pos...)
		for i := range want {
			if len(want) != len(envs) || i > 0 && want[i] <= want[i-1] {
				t.Fatalf("positions %v: want one per event, increasing", want)
			}
		}
		readers(t, tg.DB, func(name string, db core.DBTX) {
			rows, _, err := lg.ReadAfter(ctx, db, 0, 100)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			ranged, err := lg.ReadRanges(ctx, db, []position.Range{{Lo: want[0], Hi: want[2]}, {Lo: want[3], Hi: want[len(want)-1]}})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			for read, rows := range map[string][]position.Row{"after": rows, "ranges": ranged} {
				if len(rows) != len(envs) {
					t.Fatalf("%s, read %s: %d rows, want %d", name, read, len(rows), len(envs))
				}
				for i, r := range rows {
					e := envs[i]
					ev := r.Event
					if r.Err != nil || r.ID != e.ID() || r.Pos != want[i] {
						t.Fatalf("%s, read %s: row %d: id %s pos %d err %v; want %s at %d", name, read, i, r.ID, r.Pos, r.Err, e.ID(), want[i])
					}
					if ev.Status != core.StatusStream || ev.Type() != e.Type() || ev.AggregateType() != e.AggregateType() ||
						ev.AggregateID() != e.AggregateID() || ev.TenantID() != e.TenantID() ||
						!maps.Equal(ev.Headers(), e.Headers()) || !bytes.Equal(ev.Payload(), e.Payload()) ||
						!ev.CreatedAt.Equal(at) || !ev.AvailableAt.Equal(at) ||
						ev.Attempts != 0 || ev.Seq != 0 || !ev.DoneAt.IsZero() || ev.LastError != "" {
						t.Errorf("%s, read %s: row %d (%s) read back as %+v, want %+v", name, read, i, e.ID(), ev, e)
					}
				}
			}
		})
	})
}

// TestReadUndecodableRow: a STREAM row that cannot be decoded (headers that
// are not JSON, as a hand-written row may have) comes back from a read as
// its position and id with the error, beside the rows that decode, through
// the pool and through one connection.
func TestReadUndecodableRow(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		lg := schemaLog(t, tg, tg.Store)
		var envs []core.Envelope
		for _, id := range []string{"good-1", "bad-1", "good-2"} {
			e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("T"), AggregateType: core.AggregateName("A"), JSON: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, e)
		}
		pos, err := lg.InsertStream(ctx, tg.DB, envs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tg.DB.ExecContext(ctx, "UPDATE "+tg.Table+" SET headers = 'not json' WHERE event_id = 'bad-1'"); err != nil {
			t.Fatal(err)
		}
		readers(t, tg.DB, func(name string, db core.DBTX) {
			rows, _, err := lg.ReadAfter(ctx, db, 0, 10)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(rows) != 3 {
				t.Fatalf("%s: read %d rows, want 3", name, len(rows))
			}
			for i, r := range rows {
				bad := envs[i].ID() == "bad-1"
				if r.ID != envs[i].ID() || r.Pos != pos[i] || (r.Err != nil) != bad {
					t.Errorf("%s: row %d: id %s pos %d err %v; want %s at %d, an error: %v", name, i, r.ID, r.Pos, r.Err, envs[i].ID(), pos[i], bad)
				}
				if bad && r.Err != nil && !strings.Contains(r.Err.Error(), "headers") {
					t.Errorf("%s: the bad row's error %q does not name the headers", name, r.Err)
				}
			}
		})
	})
}

// readers calls read with db itself, then with one connection of it: a
// PostgreSQL pool is read with pgx, a connection through database/sql on
// every database. The connection is taken after the pool's read (SQLite's
// pool has one) and closed when read returns.
func readers(t *testing.T, db *sql.DB, read func(name string, db core.DBTX)) {
	t.Helper()
	read("pool", db)
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	read("conn", conn)
}

// BenchmarkReadAfter reads 500 STREAM rows at once, as the reader does in
// a drain, through the pool: go test -run xxx -bench ReadAfter -benchmem
// ./internal/position (PostgreSQL and MariaDB with their DSNs set).
func BenchmarkReadAfter(b *testing.B) {
	for _, name := range testdb.Dialects {
		b.Run(name, func(b *testing.B) { benchmarkReadAfter(b, testdb.Open(b, name)) })
	}
}

func benchmarkReadAfter(b *testing.B, tg testdb.Target) {
	ctx := context.Background()
	lg := schemaLog(b, tg, tg.Store)
	envs := make([]core.Envelope, 500)
	for i := range envs {
		e, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"), AggregateType: core.AggregateName("Order"),
			AggregateID: fmt.Sprintf("o-%d", i), Headers: map[string]string{"trace": "abc"}, JSON: []byte(`{"order_id":"o-123456","total_cents":125000}`)})
		if err != nil {
			b.Fatal(err)
		}
		envs[i] = e
	}
	if _, err := lg.InsertStream(ctx, tg.DB, envs); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		rows, _, err := lg.ReadAfter(ctx, tg.DB, 0, len(envs))
		if err != nil || len(rows) != len(envs) {
			b.Fatalf("read %d rows (%v), want %d", len(rows), err, len(envs))
		}
	}
}

// TestClaimState: the first claim of a table makes the zero position its
// claimer's; a later claim takes the saved position over, with its open
// ranges, and fences the previous owner's saves.
func TestClaimState(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		ctx := context.Background()
		lg := schemaLog(t, tg, tg.Store)
		t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
		st, err := lg.ClaimState(ctx, tg.DB, "a", t0)
		if err != nil || st.Floor != 0 || st.Cursor != 0 || len(st.Open) != 0 || st.Owner != "a" || !st.UpdatedAt.Equal(t0) {
			t.Fatalf("first claim: %+v, %v; want the zero position, owner a, updated at %v", st, err, t0)
		}
		saved := position.State{Floor: 3, Cursor: 9, Open: []position.Range{{Lo: 5, Hi: 6}}}
		if ok, err := lg.SaveState(ctx, tg.DB, "a", saved, t0.Add(time.Second)); err != nil || !ok {
			t.Fatalf("a's save: %v, %v", ok, err)
		}
		t2 := t0.Add(2 * time.Second)
		st, err = lg.ClaimState(ctx, tg.DB, "b", t2)
		if err != nil || st.Floor != 3 || st.Cursor != 9 || fmt.Sprint(st.Open) != fmt.Sprint(saved.Open) || st.Owner != "b" || !st.UpdatedAt.Equal(t2) {
			t.Fatalf("takeover: %+v, %v; want a's position, owner b, updated at %v", st, err, t2)
		}
		if ok, err := lg.SaveState(ctx, tg.DB, "a", position.State{Floor: 4, Cursor: 9}, t2); err != nil || ok {
			t.Fatalf("a's save after the takeover: %v, %v; want fenced", ok, err)
		}
		if st, err := lg.LoadState(ctx, tg.DB); err != nil || st.Floor != 3 || st.Owner != "b" {
			t.Fatalf("load: %+v, %v; want b's, floor 3", st, err)
		}
	})
}
