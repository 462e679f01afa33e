package position_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// leaser is the dispatcher's hook in miniature: it leases and hands on
// nothing.
type leaser struct{ core.HookFuncs }

func (leaser) LeaseOwner() string { return "test-owner" }

// TestReaderAmbiguousCommit: a COMMIT whose outcome the client did not
// learn (the connection broke while the server committed) runs the
// after-rollback hooks. When a read had already seen the committed row and
// passed it over as the hot path's, the position must be read again and
// the event delivered, not treated as a rolled-back gap.
func TestReaderAmbiguousCommit(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		f := newFixture(t, tg)
		f.cycle() // takes the position: the hot path runs only then
		ctx := context.Background()
		tx, err := tg.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		envs := []core.Envelope{env(t, "a-1")}
		if err := f.st.Insert(ctx, tx, envs, core.InsertOptions{LeaseOwner: "test-owner", LeaseAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		// The read sees a-1 committed and leaves it to the hot path.
		wantIDs(t, f.cycle())
		// The client saw the COMMIT fail: the hooks report a rollback.
		if err := f.r.Hook(leaser{}).AfterRollback(ctx, envs); err != nil {
			t.Fatal(err)
		}
		wantIDs(t, f.cycle(), "a-1")
		f.done("a-1")
		f.cycle()
		f.wantState(1, 1)
		if tg.Name == "sqlite" {
			return // one writer: no open transaction beside a commit
		}
		// A rollback that is one: the position a read passed as a gap
		// becomes final once the transaction has ended.
		tx, err = tg.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		envs = []core.Envelope{env(t, "r-1")}
		if err := f.st.Insert(ctx, tx, envs, core.InsertOptions{LeaseOwner: "test-owner", LeaseAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		f.insert(nil, "c-1")
		wantIDs(t, f.cycle(), "c-1")
		f.done("c-1")
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if err := f.r.Hook(leaser{}).AfterRollback(ctx, envs); err != nil {
			t.Fatal(err)
		}
		f.waitFloor(3)
		wantIDs(t, f.h.take())
	})
}
