package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, testdb.Conformance("postgres", mysql.Config{}))
}

// TestSchemaQualifiedTable runs a store on "schema.table": its indexes land
// in that schema, CreateSchema stays idempotent, and events go round.
func TestSchemaQualifiedTable(t *testing.T) {
	t.Parallel()
	tg := testdb.Postgres(t)
	ctx := context.Background()
	schema := testdb.UniqueName("outbox_schema")
	if _, err := tg.DB.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := tg.DB.ExecContext(context.WithoutCancel(ctx), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema: %v", err)
		}
	})
	st, err := postgres.New(postgres.Config{Table: schema + ".events"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Table() != schema+".events" {
		t.Fatalf("Table() = %q", st.Table())
	}
	for range 2 {
		if err := st.CreateSchema(ctx, tg.DB); err != nil {
			t.Fatalf("create schema: %v", err)
		}
	}
	var indexes int
	if err := tg.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM pg_indexes WHERE schemaname = $1 AND tablename = 'events'", schema).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if indexes != 6 { // primary key, pending, dead, done, seq, stream
		t.Errorf("%d indexes in %s, want 6", indexes, schema)
	}
	e, err := core.NewEnvelope(core.EnvelopeSpec{ID: "q-1", Type: core.EventName("T"), JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(ctx, tg.DB, []core.Envelope{e}, core.InsertOptions{}); err != nil {
		t.Fatal(err)
	}
	evs, _, err := st.Claim(ctx, tg.DB, core.ClaimParams{Owner: "o", Now: time.Now().Add(time.Second), LeaseTimeout: time.Minute, Limit: 10})
	if err != nil || len(evs) != 1 || evs[0].ID() != "q-1" {
		t.Fatalf("claim = %v, %v", evs, err)
	}
}

// TestDoneWaitsForWriterOfKey: a DONE batch that waits for the lock of a
// key held by a writer, which then commits the key's next event, promotes
// that event, although its statement's snapshot, taken before the commit,
// does not hold it (the promotion's second statement does).
func TestDoneWaitsForWriterOfKey(t *testing.T) {
	t.Parallel()
	tg := testdb.Postgres(t)
	ctx := context.Background()
	st, ok := core.StoreAs[core.OrderedStore](tg.Ordered)
	if !ok {
		t.Fatalf("%T is not ordered", tg.Ordered)
	}
	env := func(id string) core.Envelope {
		e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("Placed"),
			AggregateType: core.AggregateName("Order"), AggregateID: "A", JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	const owner = "finisher"
	if _, err := st.InsertOrdered(ctx, tg.DB, []core.Envelope{env("A-1")}, core.InsertOptions{LeaseOwner: owner, LeaseAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tx, err := tg.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if res, err := st.InsertOrdered(ctx, tx, []core.Envelope{env("A-2")}, core.InsertOptions{}); err != nil || len(res.Waiting) != 1 {
		t.Fatalf("write A-2: waiting %v, err %v", res.Waiting, err)
	}
	type result struct {
		n        int64
		promoted []core.Event
		err      error
	}
	done := make(chan result, 1)
	go func() {
		n, promoted, err := st.MarkDoneOrdered(ctx, tg.DB, owner, []string{"A-1"}, time.Now())
		done <- result{n, promoted, err}
	}()
	// Wait until the DONE batch waits for the key's lock, then commit.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting int
		if err := tg.DB.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "+
			"AND query LIKE '%' || $1 || '%'", tg.Table).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the DONE batch never waited for the key's lock")
		}
		<-tick.C
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.n != 1 || len(r.promoted) != 1 || r.promoted[0].ID() != "A-2" || r.promoted[0].LockedBy != owner {
		t.Fatalf("mark done A-1: n=%d promoted=%v err=%v, want A-2 promoted, leased by %s", r.n, r.promoted, r.err, owner)
	}
}

// TestDoneBatchPassesHeldKey: a DONE batch finishes the keys whose rows it
// can lock at once without waiting for a writer of another key.
func TestDoneBatchPassesHeldKey(t *testing.T) {
	t.Parallel()
	testdb.DoneBatchPassesHeldKey(t, testdb.Postgres(t))
}
