// Package upgradetest checks, for the tests of each dialect, that
// CreateSchema upgrades a table made by the previous release's DDL: the rows
// already there survive and stay claimable, ordered delivery works on it
// afterwards, and running CreateSchema again changes nothing.
package upgradetest

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// Store is what the check needs of a dialect's store.
type Store interface {
	core.Store
	core.OrderedStore
	CreateSchema(ctx context.Context, db core.DBTX) error
}

// Check creates the table with legacy (the previous release's statements,
// rendered for ordered's table), writes a row as that release did, runs
// ordered.CreateSchema twice, and checks the row and ordered delivery.
// encode converts a time to the argument the legacy INSERT binds (nil: the
// time itself).
func Check(t *testing.T, db *sql.DB, legacy []string, ordered Store, table string, encode func(time.Time) any) {
	t.Helper()
	ctx := context.Background()
	for _, stmt := range legacy {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("legacy DDL: %v\n%s", err, stmt)
		}
	}
	var at any = time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	if encode != nil {
		at = encode(at.(time.Time))
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" (event_id, event_type, aggregate_type, payload, status, attempts, available_at, created_at) "+
		"VALUES ('old-1', 'T', 'Order', '{}', 0, 0, ?, ?)", at, at); err != nil {
		// PostgreSQL numbers its markers.
		if _, err2 := db.ExecContext(ctx, "INSERT INTO "+table+" (event_id, event_type, aggregate_type, payload, status, attempts, available_at, created_at) "+
			"VALUES ('old-1', 'T', 'Order', '{}', 0, 0, $1, $2)", at, at); err2 != nil {
			t.Fatalf("legacy row: %v; %v", err, err2)
		}
	}
	for range 2 {
		if err := ordered.CreateSchema(ctx, db); err != nil {
			t.Fatalf("upgrade: %v", err)
		}
	}
	old, err := ordered.Get(ctx, db, "old-1")
	if err != nil || old.Seq != 0 || old.Status != core.StatusNew {
		t.Fatalf("legacy row after upgrade: %+v %v", old, err)
	}
	envs := make([]core.Envelope, 2)
	for i := range envs {
		envs[i], err = core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("T"), AggregateType: core.AggregateName("Order"), AggregateID: "A", JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
	}
	res, err := ordered.InsertOrdered(ctx, db, envs, core.InsertOptions{})
	if err != nil || len(res.Waiting) != 1 || res.Waiting[0] != envs[1].ID() {
		t.Fatalf("ordered insert after upgrade: %+v, err %v", res, err)
	}
	evs, _, err := ordered.Claim(ctx, db, core.ClaimParams{Owner: "o", Now: time.Now().Add(time.Second), LeaseTimeout: time.Minute, Limit: 10})
	if err != nil || len(evs) != 2 {
		t.Fatalf("claim after upgrade: %d events, %v; want the legacy row and the head", len(evs), err)
	}
}
