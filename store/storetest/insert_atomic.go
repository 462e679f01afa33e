package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/outboxkit/outbox/core"
)

// testInsertAtomic: a batch written in several statements is all or
// nothing, in the caller's transaction (which stays usable) and on a pool.
func testInsertAtomic(t *testing.T, tg Target) {
	c := ctx(t)
	insert(t, tg, env(t, "taken", base))
	batch := func(prefix string) []core.Envelope {
		envs := make([]core.Envelope, 0, 1501)
		for i := range 1500 {
			envs = append(envs, env(t, fmt.Sprintf("%s-%04d", prefix, i), base))
		}
		return append(envs, env(t, "taken", base)) // fails in the last statement
	}

	tx, err := tg.DB.BeginTx(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = tg.Store.Insert(c, tx, batch("in-tx"), core.InsertOptions{})
	if !errors.Is(err, core.ErrDuplicateEvent) {
		_ = tx.Rollback()
		t.Fatalf("batch ending in a duplicate: err = %v, want ErrDuplicateEvent", err)
	}
	// The caller handles the error and goes on: its transaction still works
	// and holds none of the failed batch.
	if err := tg.Store.Insert(c, tx, []core.Envelope{env(t, "after", base)}, core.InsertOptions{}); err != nil {
		_ = tx.Rollback()
		t.Fatalf("insert after a failed batch in the same transaction: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := tg.Store.Insert(c, tg.DB, batch("on-pool"), core.InsertOptions{}); !errors.Is(err, core.ErrDuplicateEvent) {
		t.Fatalf("batch on the pool: err = %v, want ErrDuplicateEvent", err)
	}
	if n := count(t, tg, "1 = 1"); n != 2 {
		t.Fatalf("rows = %d, want 2 (taken, after): a failed batch left rows behind", n)
	}
}
