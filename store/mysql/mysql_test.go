package mysql_test

import (
	"context"
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
