package mysql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/storetest"
)

func TestConformance(t *testing.T) {
	for _, claim := range []mysql.ClaimStrategy{mysql.ClaimSkipLocked, mysql.ClaimUpdateLimit} {
		t.Run(claim.String(), func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, testdb.Conformance("mysql", mysql.Config{Claim: claim}))
		})
	}
}

// TestConformanceSimultaneousAssignment runs the suite on connections whose
// sql_mode adds MariaDB's SIMULTANEOUS_ASSIGNMENT, under which an UPDATE's
// assignments all read the row as it was before the statement instead of
// seeing the columns assigned to their left: no statement of the store may
// depend on that order (the suite's DONE batches check what the key UPDATE
// reports through its insert id). MySQL has no such mode; the test needs
// MariaDB 10.3+.
func TestConformanceSimultaneousAssignment(t *testing.T) {
	t.Parallel()
	probe := testdb.MySQL(t)
	var version string
	if err := probe.DB.QueryRowContext(context.Background(), "SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(version, "MariaDB") {
		t.Skipf("server %s is not MariaDB: no SIMULTANEOUS_ASSIGNMENT mode", version)
	}
	open := testdb.MySQLWithSession(mysql.Config{}, map[string]string{
		"sql_mode": "CONCAT(@@sql_mode, ',SIMULTANEOUS_ASSIGNMENT')",
	})
	storetest.Run(t, storetest.Config{
		NewTarget: func(t testing.TB) storetest.Target {
			t.Helper()
			tg := open(t)
			var mode string
			if err := tg.DB.QueryRowContext(context.Background(), "SELECT @@SESSION.sql_mode").Scan(&mode); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(mode, "SIMULTANEOUS_ASSIGNMENT") {
				t.Fatalf("the session's sql_mode %q lacks SIMULTANEOUS_ASSIGNMENT", mode)
			}
			return tg.Suite()
		},
		Server: true,
	})
}

// TestSchemaQualifiedTableAndLeaseIndex runs stores on "database.table" and
// checks that the lease read-back index exists exactly when ClaimUpdateLimit
// needs it, including on a table created earlier for ClaimSkipLocked.
func TestSchemaQualifiedTableAndLeaseIndex(t *testing.T) {
	t.Parallel()
	tg := testdb.MySQL(t)
	ctx := context.Background()
	var database string
	if err := tg.DB.QueryRowContext(ctx, "SELECT DATABASE()").Scan(&database); err != nil {
		t.Fatal(err)
	}
	name := testdb.UniqueName("outbox_q")
	newStore := func(claim mysql.ClaimStrategy) *mysql.Store {
		st, err := mysql.New(mysql.Config{Table: database + "." + name, Claim: claim})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	skip, limit := newStore(mysql.ClaimSkipLocked), newStore(mysql.ClaimUpdateLimit)
	t.Cleanup(func() {
		if err := testdb.DropTable(context.WithoutCancel(ctx), tg.DB, skip); err != nil {
			t.Errorf("drop: %v", err)
		}
	})
	leaseIndex := func() int {
		var n int
		err := tg.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.statistics "+
			"WHERE table_schema = ? AND table_name = ? AND index_name = ?", database, name, name+"_lease").Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := skip.CreateSchema(ctx, tg.DB); err != nil {
		t.Fatal(err)
	}
	if n := leaseIndex(); n != 0 {
		t.Fatalf("skip-locked table has the lease index")
	}
	for range 2 {
		if err := limit.CreateSchema(ctx, tg.DB); err != nil {
			t.Fatalf("update-limit CreateSchema on an existing table: %v", err)
		}
	}
	if n := leaseIndex(); n == 0 {
		t.Fatalf("update-limit CreateSchema did not add the lease index")
	}
	e, err := core.NewEnvelope(core.EnvelopeSpec{ID: "q-1", Type: core.EventName("T"), JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := limit.Insert(ctx, tg.DB, []core.Envelope{e}, core.InsertOptions{}); err != nil {
		t.Fatal(err)
	}
	evs, _, err := limit.Claim(ctx, tg.DB, core.ClaimParams{Owner: "o", Now: time.Now().Add(time.Second), LeaseTimeout: time.Minute, Limit: 10})
	if err != nil || len(evs) != 1 || evs[0].ID() != "q-1" {
		t.Fatalf("claim = %v, %v", evs, err)
	}
}

// TestDoneBatchPassesHeldKey: a DONE batch finishes the keys whose rows it
// can lock at once without waiting for a writer of another key.
func TestDoneBatchPassesHeldKey(t *testing.T) {
	t.Parallel()
	testdb.DoneBatchPassesHeldKey(t, testdb.MySQL(t))
}

// TestDoneBatchLocksOnlyItsKeys: a DONE batch of 64 keys of a 200-key table
// finishes while a writer holds the table's first key row, outside the
// batch. Without its index hint MariaDB walked the whole primary key of
// the key table from that row for the batch's key UPDATE, and waited there.
func TestDoneBatchLocksOnlyItsKeys(t *testing.T) {
	t.Parallel()
	tg := testdb.MySQL(t)
	ctx := context.Background()
	st, ok := core.StoreAs[core.OrderedStore](tg.Ordered)
	if !ok {
		t.Fatalf("%T is not ordered", tg.Ordered)
	}
	env := func(id, key string) core.Envelope {
		e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("Placed"),
			AggregateType: core.AggregateName("Order"), AggregateID: key, JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	const owner, keys, batch = "finisher", 200, 64
	var envs []core.Envelope
	var ids []string
	for k := range keys {
		key := fmt.Sprintf("k-%03d", k)
		envs = append(envs, env(key+"-1", key))
		if k >= keys/2 && len(ids) < batch {
			ids = append(ids, key+"-1")
		}
	}
	if _, err := st.InsertOrdered(ctx, tg.DB, envs, core.InsertOptions{LeaseOwner: owner, LeaseAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tx, err := tg.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if res, err := st.InsertOrdered(ctx, tx, []core.Envelope{env("k-000-2", "k-000")}, core.InsertOptions{}); err != nil || len(res.Waiting) != 1 {
		t.Fatalf("write k-000-2: waiting %v, err %v", res.Waiting, err)
	}
	// A safety net, not a measure: a batch that waits for the writer's row
	// waits until the writer commits, which is after this call.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, promoted, err := st.MarkDoneOrdered(wctx, tg.DB, owner, ids, time.Now())
	if err != nil || n != batch || len(promoted) != 0 {
		t.Fatalf("mark done %d heads of keys k-100.. while a writer holds k-000: n=%d promoted=%v err=%v: the batch waited for a key row outside its keys", batch, n, promoted, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestDoneBatchNextEventHeld: the first pass of a DONE batch locks each key
// row with the key's next event joined (SKIP LOCKED). When another
// transaction holds that event's row, MariaDB returns the key without it;
// the batch must then leave the key to the pass that waits, not move it
// without promoting its next event (which would stay WAITING for good).
// The other key of the batch is finished at once; the held one once the
// event's row is released, and the promoted events are returned as stored.
func TestDoneBatchNextEventHeld(t *testing.T) {
	t.Parallel()
	tg := testdb.MySQL(t)
	ctx := context.Background()
	st, ok := core.StoreAs[core.OrderedStore](tg.Ordered)
	if !ok {
		t.Fatalf("%T is not ordered", tg.Ordered)
	}
	var envs []core.Envelope
	for _, id := range []string{"A-1", "A-2", "B-1", "B-2"} {
		e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("Placed"),
			AggregateType: core.AggregateName("Order"), AggregateID: id[:1], JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
	}
	const owner = "finisher"
	if res, err := st.InsertOrdered(ctx, tg.DB, envs, core.InsertOptions{LeaseOwner: owner, LeaseAt: time.Now()}); err != nil || len(res.Waiting) != 2 {
		t.Fatalf("write: waiting %v, err %v", res.Waiting, err)
	}
	tx, err := tg.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var status int
	if err := tx.QueryRowContext(ctx, "SELECT status FROM "+tg.Table+" WHERE event_id = 'A-2' FOR UPDATE").Scan(&status); err != nil || status != int(core.StatusWaiting) {
		t.Fatalf("lock A-2: status %d, err %v", status, err)
	}
	wait := testdb.MarkDoneWhileHeld(t, tg, st, owner, []string{"A-1", "B-1"}, "A-2's row was held", "B-2", core.StatusNew)
	if ev, err := tg.Store.Get(ctx, tg.DB, "A-2"); err != nil || ev.Status != core.StatusWaiting {
		t.Fatalf("A-2 while its row is held: %v, %v; want WAITING", ev.Status, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := wait()
	if r.Err != nil || r.N != 2 || len(r.Promoted) != 2 {
		t.Fatalf("mark done A-1, B-1: n=%d promoted=%v err=%v; want 2 and A-2, B-2", r.N, r.Promoted, r.Err)
	}
	for _, p := range r.Promoted {
		ev, err := tg.Store.Get(ctx, tg.DB, p.ID())
		if err != nil {
			t.Fatal(err)
		}
		if ev.Status != core.StatusNew || ev.LockedBy != owner || p.Status != ev.Status || p.LockedBy != ev.LockedBy ||
			!p.LockedAt.Equal(ev.LockedAt) || p.Seq != ev.Seq || string(p.RawPayload()) != string(ev.RawPayload()) {
			t.Errorf("promoted %s as returned: %v %q %v seq %d; as stored: %v %q %v seq %d",
				p.ID(), p.Status, p.LockedBy, p.LockedAt, p.Seq, ev.Status, ev.LockedBy, ev.LockedAt, ev.Seq)
		}
	}
}
