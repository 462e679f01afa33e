package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/purge"
)

// waitActive waits until ob's Active reports want.
func waitActive(t *testing.T, ob *outbox.Outbox, want bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for ob.Active() != want {
		if time.Now().After(end) {
			t.Fatalf("Active stayed %v", !want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// writePlain writes n events in a plain *sql.Tx: no hot path, the
// claiming instance delivers them.
func writePlain(t *testing.T, tg testdb.Target, ob *outbox.Outbox, n int, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	tx, err := tg.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	ids := make([]string, 0, n)
	for i := range n {
		id, err := ob.Writer().WriteTx(ctx, tx, newEnv(t, fmt.Sprintf("%s-%d", prefix, i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestSingleActive: of two SingleActive instances on separate pools, only
// the active one claims: it delivers every event written without the hot
// path, while the standby still delivers what it writes itself through Do.
// When the active instance closes, the standby takes over.
func TestSingleActive(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		if tg.Name == "sqlite" {
			t.Skip("SQLite has no named locks; New refuses SingleActive (TestNewValidates)")
		}
		t.Parallel()
		var sa, sb seen
		cfg := func(db outbox.DB, s *seen) outbox.Config {
			return fast(outbox.Config{DB: db, Store: tg.Store, Registry: registry(t, s), Mode: outbox.MultiNode,
				// 250 ms, not less: each check of the lock must answer
				// within the interval, and a check cut short on a loaded
				// machine hands the lock over, which the counts below do
				// not allow for.
				SingleActive: true, SingleActiveInterval: 250 * time.Millisecond})
		}
		a := start(t, cfg(tg.DB, &sa))
		waitActive(t, a, true)
		b := start(t, cfg(tg.Reopen(t), &sb))

		plain := writePlain(t, tg, a, 20, "plain")
		hot := write(t, b, 5, "hot-b")
		waitStatus(t, tg, core.StatusDone, append(plain, hot...)...)
		if b.Active() {
			t.Fatal("both instances are active")
		}
		if got := sa.count(); got != len(plain) {
			t.Errorf("the active instance delivered %d events, want the %d written without the hot path", got, len(plain))
		}
		if got := sb.count(); got != len(hot) {
			t.Errorf("the standby delivered %d events, want the %d it wrote through Do", got, len(hot))
		}

		if err := a.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitActive(t, b, true)
		later := writePlain(t, tg, b, 10, "later")
		waitStatus(t, tg, core.StatusDone, later...)
		if got := sb.count(); got != len(hot)+len(later) {
			t.Errorf("after the takeover the standby delivered %d events, want %d", got, len(hot)+len(later))
		}
	})
}

// TestMultiNodePurgesUnderLock: in MultiNode mode the purger takes the
// table's purge lock, and a run finding it held is skipped; in SingleNode
// mode it does not.
func TestMultiNodePurgesUnderLock(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		locker, ok := core.StoreAs[core.Locker](tg.Store)
		if !ok {
			t.Skip("SQLite has no named locks: the purge runs unlocked")
		}
		t.Parallel()
		ctx := context.Background()
		held, ok, err := locker.TryLock(ctx, tg.Reopen(t), purge.LockName)
		if err != nil || !ok {
			t.Fatalf("take the purge lock: %v, %v", ok, err)
		}
		defer func() { _ = held.Unlock(ctx) }()
		for _, tt := range []struct {
			mode outbox.Mode
			want error
		}{
			{outbox.MultiNode, purge.ErrLocked},
			{outbox.WriterOnly, purge.ErrLocked},
			{outbox.SingleNode, nil},
		} {
			cfg := outbox.Config{DB: tg.DB, Store: tg.Store, Registry: core.NewRegistry(), Mode: tt.mode, Purge: &purge.Config{}}
			if tt.mode == outbox.WriterOnly {
				cfg.Registry = nil
			}
			ob, err := outbox.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ob.Purger().RunOnce(ctx); !errors.Is(err, tt.want) && err != tt.want {
				t.Errorf("%s: RunOnce while another instance holds the lock: %v, want %v", tt.mode, err, tt.want)
			}
			if err := ob.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}
