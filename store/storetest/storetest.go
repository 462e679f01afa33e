// Package storetest is the conformance suite of outbox stores: it checks,
// against a real database, everything core.Store and its optional
// capabilities promise (insert, claim, lease fencing, write-backs, DONE
// batches, dead events, purge, named locks, statistics, schema, and, on a
// database server, concurrent claimers on separate pools). The stores of this module run it
// on SQLite, PostgreSQL and MariaDB; run it on your own store, or on one of
// this module's stores over another database (CockroachDB through
// store/postgres, TiDB through store/mysql), to know that the outbox works
// there.
//
// Run needs a fresh, empty outbox table per test (the tests run in
// parallel), a pool on the database and a way to open another pool;
// example_test.go runs it on SQLite as a user of the package would. On
// PostgreSQL, say:
//
//	storetest.Run(t, storetest.Config{
//		NewTarget: func(t testing.TB) storetest.Target {
//			st, err := postgres.New(postgres.Config{Table: fmt.Sprintf("outbox_t%d", n.Add(1))})
//			if err != nil {
//				t.Fatal(err)
//			}
//			if err := st.CreateSchema(context.Background(), db); err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { db.Exec("DROP TABLE " + st.Table()) })
//			return storetest.Target{DB: db, Store: st, Table: st.Table(), Reopen: openPool}
//		},
//		NewStore: func(table string) (core.Store, error) { return postgres.New(postgres.Config{Table: table}) },
//		Server:   true,
//	})
package storetest

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// Target is one fresh, empty outbox table a test of the suite runs on.
type Target struct {
	// DB is a pool on the database. Required.
	DB *sql.DB
	// Store is the store under test, on the fresh table. Required.
	Store core.Store
	// Table is the table's name as the suite may write it in its own SQL
	// (counting rows, corrupting one to check the decoding errors); quote it
	// if the database needs that. Required.
	Table string
	// Reopen returns a new, independent pool on the same database, as a
	// second process has, and closes it when t ends: claimers on separate
	// pools must never share a row. Required.
	Reopen func(t testing.TB) *sql.DB
	// Ordered is a store of the same kind on the same table whose ordering
	// is Ordering, for the checks of ordered delivery (core.OrderedStore).
	// Nil skips them.
	Ordered core.Store

	server bool // Config.Server
}

// Config is what Run needs to know of a store and its database.
type Config struct {
	// NewTarget returns a target on a fresh, empty outbox table (created, as
	// the store's CreateSchema creates it), and drops the table when t ends.
	// Tests run in parallel: NewTarget is called concurrently, and every
	// call must return a table of its own. Required.
	NewTarget func(t testing.TB) Target
	// NewStore returns a store of the same kind for another table name,
	// creating nothing. The suite checks with it that bad table names are
	// refused with core.ErrInvalid. Nil skips that check.
	NewStore func(table string) (core.Store, error)
	// Server: the database serves many writers at once (a database server,
	// not an embedded file database with one writer). Run then adds the
	// heavier checks of concurrent claimers on separate pools, which drain
	// 10,000 rows and reclaim abandoned leases.
	Server bool
	// Skip names checks that cannot apply to the store under test, each
	// with the reason, which the check logs as it skips: a wrapper that
	// changes what an insert writes (position delivery's STREAM rows, which
	// no claim reads) runs the rest. Run fails on a name it does not know,
	// so that a renamed check is not skipped silently. Default: none.
	Skip map[string]string
}

// test is one check of the suite.
type test struct {
	name string
	fn   func(*testing.T, Target)
}

// Run runs the whole conformance suite as subtests of t, each on a target
// of its own, in parallel.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.NewTarget == nil {
		t.Fatal("storetest: Config.NewTarget is required")
	}
	all := slices.Concat(insertTests, claimTests, writeBackTests, batchTests, leaseTests, deadTests, purgeTests, lockTests, statsTests, schemaTests, wakeTests, orderedTests)
	if cfg.NewStore != nil {
		all = append(all, test{"BadTableNames", func(t *testing.T, _ Target) { testBadTableNames(t, cfg.NewStore) }})
	}
	if cfg.Server {
		all = append(all, concurrencyTests...)
	}
	for name := range cfg.Skip {
		if !slices.ContainsFunc(all, func(tc test) bool { return tc.name == name }) {
			t.Errorf("storetest: Config.Skip names %q, which is no check of this run", name)
		}
	}
	for _, tc := range all {
		t.Run(tc.name, func(t *testing.T) {
			if reason, ok := cfg.Skip[tc.name]; ok {
				t.Skip(reason)
			}
			t.Parallel()
			tc.fn(t, newTarget(t, cfg))
		})
	}
}

// newTarget returns a target of cfg, checked: a missing field would
// otherwise show as a nil dereference deep in a test.
func newTarget(t *testing.T, cfg Config) Target {
	t.Helper()
	tg := cfg.NewTarget(t)
	if tg.DB == nil || tg.Store == nil || tg.Table == "" || tg.Reopen == nil {
		t.Fatalf("storetest: NewTarget returned a Target without DB, Store, Table or Reopen: %+v", tg)
	}
	tg.server = cfg.Server
	return tg
}

// base is a fixed point three days in the past, so tests control every
// time: rows are created at base and later, before the times tests mark them
// DONE or DEAD ("48 hours ago" at the earliest), as rows become terminal
// after they are created (the MySQL purge relies on it).
var base = time.Now().UTC().Add(-72 * time.Hour).Truncate(time.Second)

const owner = "owner-a"

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func env(t testing.TB, id string, at time.Time, mods ...func(*core.EnvelopeSpec)) core.Envelope {
	t.Helper()
	spec := core.EnvelopeSpec{ID: id, Type: core.EventName("Tested"), OccurredAt: at, JSON: []byte(`{"n":1}`)}
	for _, m := range mods {
		m(&spec)
	}
	e, err := core.NewEnvelope(spec)
	if err != nil {
		t.Fatalf("new envelope: %v", err)
	}
	return e
}

func insert(t testing.TB, tg Target, envs ...core.Envelope) {
	t.Helper()
	if err := tg.Store.Insert(ctx(t), tg.DB, envs, core.InsertOptions{}); err != nil {
		t.Fatalf("insert: %v", err)
	}
}

// seq inserts n events created one millisecond apart from base.
func seq(t testing.TB, tg Target, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	envs := make([]core.Envelope, n)
	for i := range n {
		ids[i] = fmt.Sprintf("%s-%05d", prefix, i)
		envs[i] = env(t, ids[i], base.Add(time.Duration(i)*time.Millisecond))
	}
	insert(t, tg, envs...)
	return ids
}

func get(t testing.TB, tg Target, id string) core.Event {
	t.Helper()
	ev, err := tg.Store.Get(ctx(t), tg.DB, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return ev
}

func claim(t testing.TB, tg Target, db core.DBTX, who string, now time.Time, limit int) []core.Event {
	t.Helper()
	evs, bad, err := tg.Store.Claim(ctx(t), db, core.ClaimParams{Owner: who, Now: now, LeaseTimeout: time.Minute, Limit: limit})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(bad) > 0 {
		t.Fatalf("claim: undecodable rows: %v", bad)
	}
	return evs
}

func ids(evs []core.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.ID()
	}
	return out
}

func count(t testing.TB, tg Target, where string) int {
	t.Helper()
	var n int
	if err := tg.DB.QueryRowContext(ctx(t), "SELECT COUNT(*) FROM "+tg.Table+" WHERE "+where).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", where, err)
	}
	return n
}
