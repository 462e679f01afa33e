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
	if indexes != 5 { // primary key, pending, dead, done, seq
		t.Errorf("%d indexes in %s, want 5", indexes, schema)
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
