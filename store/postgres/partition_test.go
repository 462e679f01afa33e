package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/purge"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/storetest"
)

// partitioned returns a store on a fresh partitioned table (daily
// partitions), created, and dropped when t ends, with the pool of a
// PostgreSQL target.
func partitioned(t testing.TB, parts postgres.Partitions) (testdb.Target, *postgres.Store, *postgres.Store) {
	t.Helper()
	base := testdb.Postgres(t)
	table := testdb.UniqueName("outbox_part")
	st, err := postgres.New(postgres.Config{Table: table, Partitions: &parts})
	if err != nil {
		t.Fatal(err)
	}
	ordered, err := postgres.New(postgres.Config{Table: table, Partitions: &parts, Ordered: storetest.Ordering})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := testdb.DropTable(context.Background(), base.DB, ordered); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
	if err := st.CreateSchema(context.Background(), base.DB); err != nil {
		t.Fatalf("create partitioned schema: %v", err)
	}
	base.Store, base.Ordered, base.Table = st, ordered, table
	return base, st, ordered
}

// TestConformancePartitioned runs the whole conformance suite on a
// partitioned table: ids the suite chooses ("e1", "p-00000001") land in the
// partition of non-ULID ids, ULIDs in the time partitions.
func TestConformancePartitioned(t *testing.T) {
	storetest.Run(t, storetest.Config{
		NewTarget: func(t testing.TB) storetest.Target {
			tg, _, _ := partitioned(t, postgres.Partitions{})
			return tg.Suite()
		},
		NewStore: func(table string) (core.Store, error) {
			return postgres.New(postgres.Config{Table: table, Partitions: &postgres.Partitions{}})
		},
		Server: true,
	})
}

// idAt returns a fresh ULID of time at.
func idAt(at time.Time) string {
	return ulid.MustNew(ulid.Timestamp(at), ulid.DefaultEntropy()).String()
}

func mustEnv(t testing.TB, id string) core.Envelope {
	t.Helper()
	e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("T"), JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func insert(t testing.TB, db core.DBTX, st core.Store, ids ...string) {
	t.Helper()
	envs := make([]core.Envelope, len(ids))
	for i, id := range ids {
		envs[i] = mustEnv(t, id)
	}
	if err := st.Insert(context.Background(), db, envs, core.InsertOptions{}); err != nil {
		t.Fatalf("insert %v: %v", ids, err)
	}
}

// partitionOf returns the partition holding the row id.
func partitionOf(t testing.TB, db *sql.DB, table, id string) string {
	t.Helper()
	var part string
	if err := db.QueryRow("SELECT tableoid::regclass::text FROM "+table+" WHERE event_id = $1", id).Scan(&part); err != nil {
		t.Fatalf("partition of %s: %v", id, err)
	}
	return part
}

func timed(parts []postgres.Partition) []postgres.Partition {
	var out []postgres.Partition
	for _, p := range parts {
		if p.Timed() {
			out = append(out, p)
		}
	}
	return out
}

// TestPartitionLayout: CreateSchema makes the three catch-all partitions and
// the time partitions from the current interval through Ahead more; each id
// lands where the layout says; MaintainPartitions later creates the next
// partitions and moves rows the DEFAULT partition held for them.
func TestPartitionLayout(t *testing.T) {
	t.Parallel()
	tg, st, _ := partitioned(t, postgres.Partitions{Interval: time.Hour, Ahead: 2})
	ctx := context.Background()
	parts, err := st.ListPartitions(ctx, tg.DB)
	if err != nil {
		t.Fatal(err)
	}
	tp := timed(parts)
	if len(parts) != 6 || len(tp) != 3 {
		t.Fatalf("partitions %+v, want 3 catch-alls and 3 hourly ones", parts)
	}
	first := tp[0].Start
	for i, p := range tp {
		if !p.Start.Equal(first.Add(time.Duration(i)*time.Hour)) || !p.End.Equal(p.Start.Add(time.Hour)) {
			t.Errorf("time partition %d: %+v", i, p)
		}
	}
	if parts[0].From != "" || parts[0].To != postgres.IDBound(first) || parts[1].From != "1" || parts[1].To != "" || !parts[2].Default || parts[2].Name != tg.Table+"_pdefault" {
		t.Errorf("catch-all partitions: %+v", parts[:3])
	}

	cur, old, far := idAt(first.Add(time.Minute)), idAt(first.Add(-48*time.Hour)), idAt(first.Add(5*time.Hour+time.Minute))
	insert(t, tg.DB, st, cur, old, far, "order-1", "0abc")
	for id, want := range map[string]string{cur: tp[0].Name, old: parts[0].Name, far: tg.Table + "_pdefault", "order-1": parts[1].Name, "0abc": tg.Table + "_pdefault"} {
		if got := partitionOf(t, tg.DB, tg.Table, id); got != want {
			t.Errorf("%s is in %s, want %s", id, got, want)
		}
	}
	// The primary key is event_id: a duplicate id in a time partition is
	// refused as in the plain table.
	if err := st.Insert(ctx, tg.DB, []core.Envelope{mustEnv(t, cur)}, core.InsertOptions{}); !errors.Is(err, core.ErrDuplicateEvent) {
		t.Errorf("duplicate ULID: %v, want ErrDuplicateEvent", err)
	}

	// Three hours later: partitions up to first+6h; far moves out of DEFAULT.
	created, dropped, err := st.MaintainPartitions(ctx, tg.DB, first.Add(3*time.Hour+time.Minute), core.PurgeParams{})
	if err != nil || len(created) != 3 || len(dropped) != 0 {
		t.Fatalf("maintain: created %v, dropped %v, err %v; want 3 created", created, dropped, err)
	}
	want := tg.Table + "_p" + first.Add(5*time.Hour).Format("20060102_1504")
	if got := partitionOf(t, tg.DB, tg.Table, far); got != want {
		t.Errorf("after maintenance %s is in %s, want %s", far, got, want)
	}
	if ev, err := st.Get(ctx, tg.DB, far); err != nil || ev.Status != core.StatusNew {
		t.Errorf("moved row: %+v, %v", ev, err)
	}
	// Again at the same time: nothing to do.
	if created, _, err := st.MaintainPartitions(ctx, tg.DB, first.Add(3*time.Hour+time.Minute), core.PurgeParams{}); err != nil || len(created) != 0 {
		t.Errorf("second maintenance: created %v, err %v", created, err)
	}
}

func exec(t testing.TB, db core.DBTX, q string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func names(parts []postgres.Partition) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = p.Name
	}
	return out
}

// TestPartitionDropRule: the purge drops a time partition that ends before
// its cutoffs only when every row in it is one a row-by-row purge would
// delete; a NEW, RETRY or WAITING row, a DONE row delivered after the
// cutoff, or a DEAD row while DEAD rows are kept, keeps it. The purger
// (package purge) runs it before its row batches.
func TestPartitionDropRule(t *testing.T) {
	t.Parallel()
	tg, st, _ := partitioned(t, postgres.Partitions{Interval: time.Minute, Ahead: 6})
	ctx := context.Background()
	parts, err := st.ListPartitions(ctx, tg.DB)
	if err != nil {
		t.Fatal(err)
	}
	tp := timed(parts)
	if len(tp) < 6 {
		t.Fatalf("%d time partitions, want at least 6", len(tp))
	}
	now := time.Now()
	// Partition i holds three DONE rows and the row of case i.
	cases := []struct{ name, set string }{
		{"all done", "status = 1, done_at = $2"},
		{"retry", "status = 2"},
		{"dead", "status = 3, done_at = $2"},
		{"waiting", "status = 4, seq = 2, aggregate_id = 'k'"},
		{"new", "status = 0"},
		{"done late", "status = 1, done_at = $2::timestamptz + interval '1 hour'"},
	}
	ids := make([][]string, len(cases))
	for i, c := range cases {
		for j := range 4 {
			ids[i] = append(ids[i], idAt(tp[i].Start.Add(time.Duration(j)*time.Second)))
		}
		insert(t, tg.DB, st, ids[i]...)
		exec(t, tg.DB, "UPDATE "+tg.Table+" SET status = 1, done_at = $2 WHERE event_id = ANY ($1)", ids[i][:3], now)
		args := []any{ids[i][3]}
		if strings.Contains(c.set, "$2") {
			args = append(args, now)
		}
		exec(t, tg.DB, "UPDATE "+tg.Table+" SET "+c.set+" WHERE event_id = $1", args...)
	}
	insert(t, tg.DB, st, "order-1", idAt(tp[0].Start.Add(-time.Hour))) // pother, pbefore
	exec(t, tg.DB, "UPDATE "+tg.Table+" SET status = 1, done_at = $1 WHERE event_id NOT LIKE '01%' OR event_id < $2", now, tp[0].From)

	// The partitions of the cases end before the cutoff (a cutoff in the
	// future keeps the test off the clock), the empty ones after them do
	// not; DEAD rows kept.
	cutoff := tp[len(cases)-1].End
	_, dropped, err := st.MaintainPartitions(ctx, tg.DB, now, core.PurgeParams{DoneBefore: cutoff})
	if err != nil || len(dropped) != 1 || dropped[0] != tp[0].Name {
		t.Fatalf("dropped %v, %v; want only %s (%s)", dropped, err, tp[0].Name, cases[0].name)
	}
	_, dropped, err = st.MaintainPartitions(ctx, tg.DB, now, core.PurgeParams{DoneBefore: cutoff, DeadBefore: cutoff})
	if err != nil || len(dropped) != 1 || dropped[0] != tp[2].Name {
		t.Fatalf("with DEAD rows purged: dropped %v, %v; want only %s (%s)", dropped, err, tp[2].Name, cases[2].name)
	}
	for i, c := range cases {
		var n int
		if err := tg.DB.QueryRow("SELECT count(*) FROM "+tg.Table+" WHERE event_id = ANY ($1)", ids[i]).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{true: 0, false: 4}[i == 0 || i == 2]; n != want {
			t.Errorf("%s: %d rows left, want %d", c.name, n, want)
		}
	}
	// The catch-alls are never dropped, however old their rows.
	after, err := st.ListPartitions(ctx, tg.DB)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts[:3] {
		if !slices.Contains(names(after), p.Name) {
			t.Errorf("%s dropped", p.Name)
		}
	}
}

// TestPurgerDropsPartitions: purge.Purger's run drops the partitions first,
// then deletes the old rows of the others, and counts only the latter.
func TestPurgerDropsPartitions(t *testing.T) {
	t.Parallel()
	tg, st, _ := partitioned(t, postgres.Partitions{Interval: time.Minute, Ahead: 2})
	ctx := context.Background()
	parts, err := st.ListPartitions(ctx, tg.DB)
	if err != nil {
		t.Fatal(err)
	}
	tp := timed(parts)
	var old []string
	for j := range 5 {
		old = append(old, idAt(tp[0].Start.Add(time.Duration(j)*time.Second)))
	}
	insert(t, tg.DB, st, old...)
	insert(t, tg.DB, st, "order-1", "order-2", idAt(tp[1].Start))
	done := time.Now().Add(-10 * 24 * time.Hour)
	exec(t, tg.DB, "UPDATE "+tg.Table+" SET status = 1, done_at = $1 WHERE event_id <> 'order-2'", done)

	p, err := purge.New(purge.Config{Store: st, DB: tg.DB, Retention: time.Hour,
		Now: func() time.Time { return tp[len(tp)-1].End.Add(2 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	n, err := p.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Dropped: the partitions of tp[0] (5 rows) and tp[1] (1 row) and the
	// empty tp[2]; deleted row by row: order-1.
	if n != 1 {
		t.Errorf("purge deleted %d rows, want 1 (order-1; the rows of dropped partitions are not counted)", n)
	}
	var left []string
	rows, err := tg.DB.Query("SELECT event_id FROM " + tg.Table)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		_ = rows.Scan(&id)
		left = append(left, id)
	}
	_ = rows.Close()
	if !slices.Equal(left, []string{"order-2"}) {
		t.Errorf("rows left %v, want [order-2]", left)
	}
	after, err := st.ListPartitions(ctx, tg.DB)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range tp {
		if slices.Contains(names(after), p.Name) {
			t.Errorf("%s not dropped", p.Name)
		}
	}
}

// TestMaintainPartitionsConcurrently: processes maintaining the same table
// at once take turns; each partition is made once and none fails.
func TestMaintainPartitionsConcurrently(t *testing.T) {
	t.Parallel()
	tg, st, _ := partitioned(t, postgres.Partitions{Interval: time.Hour, Ahead: 1})
	ctx := context.Background()
	later := time.Now().Add(30 * time.Hour)
	errs := make(chan error, 4)
	made := make(chan int, 4)
	for range 4 {
		db := tg.Reopen(t)
		go func() {
			created, _, err := st.MaintainPartitions(ctx, db, later, core.PurgeParams{})
			made <- len(created)
			errs <- err
		}()
	}
	total := 0
	for range 4 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
		total += <-made
	}
	parts, err := st.ListPartitions(ctx, tg.DB)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(timed(parts)); total != 30 || n != 32 {
		t.Errorf("created %d partitions in all, %d time partitions; want 30 and 32", total, n)
	}
}

// TestMigrateToPartitioned converts plain tables, of the current schema with
// rows in every state and of the first released schema, into partitioned
// ones: every row survives as it was, in the partition its id says, claims,
// write-backs and ordered delivery go on, and running it again changes
// nothing.
func TestMigrateToPartitioned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := testdb.Postgres(t)
	db := base.DB
	table := testdb.UniqueName("outbox_mig")
	plain, err := postgres.New(postgres.Config{Table: table, Ordered: storetest.Ordering})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testdb.DropTable(context.Background(), db, plain) })
	if err := plain.CreateSchema(ctx, db); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ids := map[string]string{}
	for _, name := range []string{"new", "leased", "retry", "done", "dead", "head", "waiting", "old"} {
		ids[name] = idAt(now)
	}
	ids["old"] = idAt(now.Add(-48 * time.Hour))
	ids["caller"] = "order-7"
	insert(t, db, plain, ids["new"], ids["retry"], ids["done"], ids["dead"], ids["old"], ids["caller"])
	if err := plain.Insert(ctx, db, []core.Envelope{mustEnv(t, ids["leased"])}, core.InsertOptions{LeaseOwner: "hot", LeaseAt: now}); err != nil {
		t.Fatal(err)
	}
	keyed := func(id string) core.Envelope {
		e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("Placed"), AggregateType: core.AggregateName("Order"), AggregateID: "A", JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	if res, err := plain.InsertOrdered(ctx, db, []core.Envelope{keyed(ids["head"]), keyed(ids["waiting"])}, core.InsertOptions{}); err != nil || len(res.Waiting) != 1 {
		t.Fatalf("ordered insert: %+v %v", res, err)
	}
	exec(t, db, "UPDATE "+table+" SET locked_by = 'w', locked_at = now() WHERE event_id = ANY ($1)",
		[]string{ids["retry"], ids["done"], ids["dead"], ids["caller"]})
	for name, mark := range map[string]func(string) (bool, error){
		"retry":  func(id string) (bool, error) { return plain.MarkRetry(ctx, db, "w", id, now, "boom") },
		"done":   func(id string) (bool, error) { return plain.MarkDone(ctx, db, "w", id, now) },
		"dead":   func(id string) (bool, error) { return plain.MarkDead(ctx, db, "w", id, now, "gave up") },
		"caller": func(id string) (bool, error) { return plain.MarkDone(ctx, db, "w", id, now) },
	} {
		if ok, err := mark(ids[name]); !ok || err != nil {
			t.Fatalf("mark %s: %v %v", name, ok, err)
		}
	}
	before := map[string]core.Event{}
	for name, id := range ids {
		if before[name], err = plain.Get(ctx, db, id); err != nil {
			t.Fatal(err)
		}
	}

	parted, err := postgres.New(postgres.Config{Table: table, Ordered: storetest.Ordering, Partitions: &postgres.Partitions{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parted.ListPartitions(ctx, db); !errors.Is(err, postgres.ErrNotPartitioned) {
		t.Fatalf("list partitions of the plain table: %v, want ErrNotPartitioned", err)
	}
	copied, err := parted.MigrateToPartitioned(ctx, db)
	if err != nil || copied != int64(len(ids)) {
		t.Fatalf("migrate: %d rows, %v; want %d", copied, err, len(ids))
	}
	for name, id := range ids {
		after, err := parted.Get(ctx, db, id)
		if err != nil || fmt.Sprintf("%+v", after) != fmt.Sprintf("%+v", before[name]) {
			t.Errorf("%s after the migration:\n%+v, %v\nwas\n%+v", name, after, err, before[name])
		}
	}
	parts, err := parted.ListPartitions(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if got := partitionOf(t, db, table, ids["old"]); got != parts[0].Name {
		t.Errorf("old row in %s, want %s", got, parts[0].Name)
	}
	if got := partitionOf(t, db, table, ids["caller"]); got != parts[1].Name {
		t.Errorf("caller-chosen id in %s, want %s", got, parts[1].Name)
	}
	if got := partitionOf(t, db, table, ids["new"]); got != timed(parts)[0].Name {
		t.Errorf("new row in %s, want %s", got, timed(parts)[0].Name)
	}
	if n, err := parted.MigrateToPartitioned(ctx, db); err != nil || n != 0 {
		t.Errorf("second migration: %d, %v", n, err)
	}

	// The outbox goes on: the claimable rows are claimed (not the leased,
	// the terminal or the waiting one), and finishing the key's head
	// promotes the waiting event.
	evs, _, err := parted.Claim(ctx, db, core.ClaimParams{Owner: "o", Now: now.Add(time.Second), LeaseTimeout: time.Hour, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		got = append(got, ev.ID())
	}
	want := []string{ids["new"], ids["retry"], ids["head"], ids["old"]}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("claimed %v, want %v", got, want)
	}
	n, promoted, err := parted.MarkDoneOrdered(ctx, db, "o", []string{ids["head"]}, now)
	if err != nil || n != 1 || len(promoted) != 1 || promoted[0].ID() != ids["waiting"] {
		t.Errorf("finish the head: %d, %v, %v; want %s promoted", n, promoted, err, ids["waiting"])
	}
	if err := parted.Insert(ctx, db, []core.Envelope{mustEnv(t, ids["done"])}, core.InsertOptions{}); !errors.Is(err, core.ErrDuplicateEvent) {
		t.Errorf("duplicate of a migrated id: %v, want ErrDuplicateEvent", err)
	}
}

// TestMigrateShippedToPartitioned: a table of the first released schema
// (no seq column) converts too.
func TestMigrateShippedToPartitioned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := testdb.Postgres(t)
	table := testdb.UniqueName("outbox_mig")
	parted, err := postgres.New(postgres.Config{Table: table, Partitions: &postgres.Partitions{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testdb.DropTable(context.Background(), base.DB, parted) })
	if err := testdb.CreateShippedSchema(ctx, base.DB, parted); err != nil {
		t.Fatal(err)
	}
	if err := testdb.InsertShippedRow(ctx, base.DB, "postgres", table, "shipped-1"); err != nil {
		t.Fatal(err)
	}
	if n, err := parted.MigrateToPartitioned(ctx, base.DB); err != nil || n != 1 {
		t.Fatalf("migrate: %d, %v", n, err)
	}
	if ev, err := parted.Get(ctx, base.DB, "shipped-1"); err != nil || ev.Status != core.StatusNew {
		t.Fatalf("shipped row: %+v, %v", ev, err)
	}
}

// TestPartitionsConfig: bad settings are refused by New; a partitioned
// store on a plain table says so instead of creating partitions.
func TestPartitionsConfig(t *testing.T) {
	t.Parallel()
	for _, p := range []postgres.Partitions{{Interval: time.Second}, {Interval: 90 * time.Second}, {Interval: -time.Hour}, {Ahead: -1}, {LockTimeout: -time.Second}} {
		if _, err := postgres.New(postgres.Config{Partitions: &p}); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", p, err)
		}
	}
	tg := testdb.Postgres(t) // a plain table
	st, err := postgres.New(postgres.Config{Table: tg.Table, Partitions: &postgres.Partitions{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSchema(context.Background(), tg.DB); !errors.Is(err, postgres.ErrNotPartitioned) {
		t.Errorf("CreateSchema of a partitioned store on a plain table: %v, want ErrNotPartitioned", err)
	}
	if _, _, err := st.MaintainPartitions(context.Background(), tg.DB, time.Now(), core.PurgeParams{}); !errors.Is(err, postgres.ErrNotPartitioned) {
		t.Errorf("MaintainPartitions on a plain table: %v, want ErrNotPartitioned", err)
	}
	if _, err := tg.Store.(*postgres.Store).MigrateToPartitioned(context.Background(), tg.DB); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("MigrateToPartitioned without Config.Partitions: %v, want ErrInvalid", err)
	}
}
