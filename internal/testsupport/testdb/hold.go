package testdb

import (
	"context"
	"database/sql"
	"testing"

	"github.com/outboxkit/outbox/core"
)

// OrderedEnv returns a "Placed" event of aggType with id and aggregate id
// key (an "Order" is ordered in Target.Ordered).
func OrderedEnv(t testing.TB, id, aggType, key string) core.Envelope {
	t.Helper()
	e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("Placed"),
		AggregateType: core.AggregateName(aggType), AggregateID: key, JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// HoldKey begins a transaction on tg.DB that writes env, an ordered event
// stored WAITING behind its key's head, through tg.Ordered: the writer of
// the key then holds the key's row until the caller commits the
// transaction, which is rolled back when the test ends if not.
func HoldKey(t testing.TB, tg Target, env core.Envelope) *sql.Tx {
	t.Helper()
	ctx := context.Background()
	st, ok := core.StoreAs[core.OrderedStore](tg.Ordered)
	if !ok {
		t.Fatalf("%T is not ordered", tg.Ordered)
	}
	tx, err := tg.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if res, err := st.InsertOrdered(ctx, tx, []core.Envelope{env}, core.InsertOptions{}); err != nil || len(res.Waiting) != 1 {
		t.Fatalf("write %s: waiting %v, err %v", env.ID(), res.Waiting, err)
	}
	return tx
}
