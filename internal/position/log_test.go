package position_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
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
		lg := position.LogOf(tg.Store)
		if lg == nil {
			t.Skipf("%s has no position log", tg.Name)
		}
		if err := lg.CheckSchema(ctx, tg.DB); err != nil {
			t.Fatal(err)
		}
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
		rows, _, err := lg.ReadAfter(ctx, tg.DB, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(envs) {
			t.Fatalf("read %d rows, want %d", len(rows), len(envs))
		}
		for i, r := range rows {
			e := envs[i]
			ev := r.Event
			if r.Err != nil || r.ID != e.ID() || r.Pos != want[i] {
				t.Fatalf("row %d: id %s pos %d err %v; want %s at %d", i, r.ID, r.Pos, r.Err, e.ID(), want[i])
			}
			if ev.Status != core.StatusStream || ev.Type() != e.Type() || ev.AggregateType() != e.AggregateType() ||
				ev.AggregateID() != e.AggregateID() || ev.TenantID() != e.TenantID() ||
				!maps.Equal(ev.Headers(), e.Headers()) || !bytes.Equal(ev.Payload(), e.Payload()) ||
				!ev.CreatedAt.Equal(at) || !ev.AvailableAt.Equal(at) ||
				ev.Attempts != 0 || ev.Seq != 0 || !ev.DoneAt.IsZero() || ev.LastError != "" {
				t.Errorf("row %d (%s) read back as %+v, want %+v", i, e.ID(), ev, e)
			}
		}
	})
}
