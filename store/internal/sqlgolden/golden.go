// Package sqlgolden writes down the SQL a store really runs, operation by
// operation, and compares it with the golden files in the dialect's
// testdata directory: each dialect's SQL then reads in one place, and every
// change of it shows in review. The statements are captured by a
// database/sql driver that runs nothing, so the check needs no database.
//
//	go test ./store/... -update
//
// rewrites the files. Only the tests of the dialect packages import it.
package sqlgolden

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

var update = flag.Bool("update", false, "rewrite the golden SQL files in testdata")

// Store is what the golden files cover: every operation of this module's
// stores.
type Store interface {
	core.Store
	core.BatchMarker
	core.DoneDeleter
	core.LeaseRenewer
	core.Inspector
	core.OrderedStore
	CreateSchema(ctx context.Context, db core.DBTX) error
}

// op is one call whose statements go to a golden file.
type op struct {
	file, call string
	run        func(ctx context.Context, st Store, db core.DBTX) error
}

var (
	now   = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	three = []string{"e-1", "e-2", "e-3"}
)

func envelopes(n int) []core.Envelope {
	out := make([]core.Envelope, n)
	for i := range out {
		e, err := core.NewEnvelope(core.EnvelopeSpec{ID: fmt.Sprintf("e-%d", i+1), Type: core.EventName("Tested"), OccurredAt: now, JSON: []byte(`{}`)})
		if err != nil {
			panic(err)
		}
		out[i] = e
	}
	return out
}

var ops = []op{
	{"ddl", "CreateSchema", func(ctx context.Context, st Store, db core.DBTX) error { return st.CreateSchema(ctx, db) }},
	{"insert", "Insert of one event", func(ctx context.Context, st Store, db core.DBTX) error {
		return st.Insert(ctx, db, envelopes(1), core.InsertOptions{})
	}},
	{"insert", "Insert of one event with every optional column, leased by its writer (the hot path)", func(ctx context.Context, st Store, db core.DBTX) error {
		e, err := core.NewEnvelope(core.EnvelopeSpec{ID: "e-1", Type: core.EventName("Tested"), AggregateType: core.AggregateName("Order"),
			AggregateID: "o-1", TenantID: "t-1", Headers: map[string]string{"k": "v"}, OccurredAt: now, JSON: []byte(`{}`)})
		if err != nil {
			return err
		}
		return st.Insert(ctx, db, []core.Envelope{e}, core.InsertOptions{LeaseOwner: "owner", LeaseAt: now})
	}},
	{"insert", "Insert of two events, leased by their writer (the hot path)", func(ctx context.Context, st Store, db core.DBTX) error {
		return st.Insert(ctx, db, envelopes(2), core.InsertOptions{LeaseOwner: "owner", LeaseAt: now})
	}},
	{"claim", "Claim", func(ctx context.Context, st Store, db core.DBTX) error {
		_, _, err := st.Claim(ctx, db, core.ClaimParams{Owner: "owner", Now: now, LeaseTimeout: time.Minute, SkipRecent: time.Second, Limit: 100})
		return err
	}},
	{"claim", "Claim from a point in the backlog (ClaimParams.From)", func(ctx context.Context, st Store, db core.DBTX) error {
		_, _, err := st.Claim(ctx, db, core.ClaimParams{Owner: "owner", Now: now, LeaseTimeout: time.Minute, SkipRecent: time.Second, Limit: 100, From: now.Add(-time.Hour)})
		return err
	}},
	{"writeback", "MarkDone", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.MarkDone(ctx, db, "owner", "e-1", now)
		return err
	}},
	{"writeback", "MarkRetry", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.MarkRetry(ctx, db, "owner", "e-1", now, "boom")
		return err
	}},
	{"writeback", "MarkDead", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.MarkDead(ctx, db, "owner", "e-1", now, "boom")
		return err
	}},
	{"writeback", "Release of three events", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.Release(ctx, db, "owner", three)
		return err
	}},
	{"batch", "MarkDoneBatch of three events", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.MarkDoneBatch(ctx, db, "owner", three, now)
		return err
	}},
	{"batch", "DeleteDoneBatch of three events", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.DeleteDoneBatch(ctx, db, "owner", three)
		return err
	}},
	{"lease", "RenewLeases of three events", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.RenewLeases(ctx, db, "owner", three, now)
		return err
	}},
	{"get", "Get", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.Get(ctx, db, "e-1")
		return err
	}},
	{"dead", "QueryDead, no filter", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.QueryDead(ctx, db, core.DeadFilter{})
		return err
	}},
	{"dead", "QueryDead by event and aggregate type", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.QueryDead(ctx, db, core.DeadFilter{EventType: "Tested", AggregateType: "Order", Limit: 10})
		return err
	}},
	{"dead", "CountDead by event type", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.CountDead(ctx, db, core.DeadFilter{EventType: "Tested"})
		return err
	}},
	{"dead", "ReplayDead of three events", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.ReplayDead(ctx, db, three, now)
		return err
	}},
	{"dead", "ReplayDeadBatch by event type", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.ReplayDeadBatch(ctx, db, core.DeadFilter{EventType: "Tested"}, 500, now)
		return err
	}},
	{"purge", "Purge of DONE and DEAD rows", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.Purge(ctx, db, core.PurgeParams{DoneBefore: now, DeadBefore: now, Limit: 500})
		return err
	}},
	{"purge", "Purge of DONE rows only", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.Purge(ctx, db, core.PurgeParams{DoneBefore: now, Limit: 500})
		return err
	}},
	{"stats", "Stats", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.Stats(ctx, db)
		return err
	}},
	{"stats", "CountPurgeable", func(ctx context.Context, st Store, db core.DBTX) error {
		_, _, err := st.CountPurgeable(ctx, db, core.PurgeParams{DoneBefore: now, DeadBefore: now})
		return err
	}},
	{"stats", "CountByType", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.CountByType(ctx, db)
		return err
	}},
}

// orderedOps cover ordered delivery (core.OrderedStore), for a store whose
// Ordering orders the aggregate type "Order"; they go to ordered.sql.
var orderedOps = []op{
	{"ordered", "InsertOrdered of two events of one key and one unordered event, in the caller's transaction", func(ctx context.Context, st Store, db core.DBTX) error {
		envs := make([]core.Envelope, 3)
		for i := range envs {
			spec := core.EnvelopeSpec{ID: fmt.Sprintf("e-%d", i+1), Type: core.EventName("Tested"), OccurredAt: now, JSON: []byte(`{}`)}
			if i < 2 {
				spec.AggregateType, spec.AggregateID = core.AggregateName("Order"), "o-1"
			}
			e, err := core.NewEnvelope(spec)
			if err != nil {
				return err
			}
			envs[i] = e
		}
		tx, err := db.(core.TxBeginner).BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		_, err = st.InsertOrdered(ctx, tx, envs, core.InsertOptions{LeaseOwner: "owner", LeaseAt: now})
		return err
	}},
	{"ordered", "MarkDoneOrdered of three events (one of them ordered)", func(ctx context.Context, st Store, db core.DBTX) error {
		_, _, err := st.MarkDoneOrdered(ctx, db, "owner", three, now)
		return err
	}},
	{"ordered", "MarkDeadOrdered", func(ctx context.Context, st Store, db core.DBTX) error {
		_, _, err := st.MarkDeadOrdered(ctx, db, "owner", "e-1", now, "boom")
		return err
	}},
	{"ordered", "SkipDead of three events", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.SkipDead(ctx, db, three, now)
		return err
	}},
	{"ordered", "BlockedKeys by aggregate type", func(ctx context.Context, st Store, db core.DBTX) error {
		_, err := st.BlockedKeys(ctx, db, core.DeadFilter{AggregateType: "Order", Limit: 10})
		return err
	}},
}

// lockOps cover the named locks of the stores that have them (core.Locker).
var lockOps = []op{
	{"lock", "TryLock, Check and Unlock", func(ctx context.Context, st Store, db core.DBTX) error {
		locker, _ := core.StoreAs[core.Locker](st)
		l, ok, err := locker.TryLock(ctx, db.(core.Conner), "purge")
		if err != nil || !ok {
			return fmt.Errorf("lock not taken (ok=%v): %w", ok, err)
		}
		if err := l.Check(ctx); err != nil {
			return err
		}
		return l.Unlock(ctx)
	}},
}

// notifierOps use core.InsertNotifier, found with core.StoreAs; stores
// without it get no file for them.
var notifierOps = []op{
	// The LISTEN of core.WakeSource runs on a driver connection of its own,
	// which the recorder cannot see; its statement is LISTEN on the same
	// channel.
	{"wake", "NotifyInsert (core.InsertNotifier), in the writer's transaction", func(ctx context.Context, st Store, db core.DBTX) error {
		n, _ := core.StoreAs[core.InsertNotifier](st)
		return n.NotifyInsert(ctx, db)
	}},
}

// Record runs every operation on st over the recording driver and returns
// the golden files' contents by file name (without ".sql").
func Record(st Store) map[string]string {
	db, rec := open()
	defer db.Close()
	ctx := context.Background()
	files := map[string]*strings.Builder{}
	all := ops
	if _, ok := core.StoreAs[core.Locker](st); ok {
		all = append(slices.Clip(all), lockOps...)
	}
	if _, ok := core.StoreAs[core.InsertNotifier](st); ok {
		all = append(slices.Clip(all), notifierOps...)
	}
	if len(st.Ordering()) > 0 {
		all = append(slices.Clip(all), orderedOps...)
	}
	for _, o := range all {
		// The store's own error is irrelevant: the recorder answers only as
		// far as the store's next statement needs.
		_ = o.run(ctx, st, db)
		b := files[o.file]
		if b == nil {
			b = &strings.Builder{}
			files[o.file] = b
		} else {
			b.WriteString("\n")
		}
		fmt.Fprintf(b, "-- %s\n", o.call)
		for _, stmt := range rec.take() {
			b.WriteString(strings.TrimSpace(stmt) + ";\n")
		}
	}
	out := make(map[string]string, len(files))
	for name, b := range files {
		out[name] = b.String()
	}
	return out
}

// Check compares the statements st runs with testdata/<name><suffix>.sql,
// or rewrites those files under -update. With only, it covers just those
// files (for a store variant that differs from another in a few
// operations).
func Check(t *testing.T, st Store, suffix string, only ...string) {
	t.Helper()
	got := Record(st)
	names := make([]string, 0, len(got))
	for name := range got {
		if len(only) == 0 || slices.Contains(only, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		path := filepath.Join("testdata", name+suffix+".sql")
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(got[name]), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("%v (go test -update writes it)", err)
			continue
		}
		if string(want) != got[name] {
			t.Errorf("%s: the store's SQL changed; review the change and run go test -update.\ngot:\n%s\nwant:\n%s", path, got[name], want)
		}
	}
}
