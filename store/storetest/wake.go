package storetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// wakeTests check core.InsertNotifier and core.WakeSource together; stores
// without both skip them.
var wakeTests = []test{
	{"WakeOnCommitOnly", testWakeOnCommitOnly},
	{"WatchStops", testWatchStops},
}

// quiet is how long a check that no wake-up comes waits for one. An absence
// cannot be awaited on a condition; a late signal only makes the check pass
// when it should fail, never the other way round.
const quiet = 300 * time.Millisecond

// watcher runs Watch on a pool of its own (as another instance has) and
// returns the wake-ups it receives; it fails the test unless Watch ends with
// ctx's error when the test ends.
func watcher(t *testing.T, tg Target) (<-chan struct{}, core.InsertNotifier) {
	t.Helper()
	src, okSrc := core.StoreAs[core.WakeSource](tg.Store)
	n, okN := core.StoreAs[core.InsertNotifier](tg.Store)
	if !okSrc || !okN {
		t.Skip("the store is not a core.WakeSource and a core.InsertNotifier")
	}
	wakes := make(chan struct{}, 64)
	c, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	db := tg.Reopen(t)
	go func() {
		done <- src.Watch(c, db, func() {
			select {
			case wakes <- struct{}{}:
			default:
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch after cancel returned %v, want context.Canceled", err)
		}
	})
	select {
	case <-wakes: // subscribed
	case err := <-done:
		done <- err // for the cleanup, which waits for Watch to end
		t.Fatalf("Watch returned before it subscribed: %v", err)
	case <-c.Done():
		t.Fatal("no wake-up once subscribed")
	}
	return wakes, n
}

// testWakeOnCommitOnly: a notification sent in a transaction wakes a watcher
// on another pool when the transaction commits, never when it rolls back,
// and several in one transaction wake it once.
func testWakeOnCommitOnly(t *testing.T, tg Target) {
	wakes, n := watcher(t, tg)
	c := ctx(t)
	write := func(id string, notifies int, commit bool) {
		t.Helper()
		tx, err := tg.DB.BeginTx(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		if err := tg.Store.Insert(c, tx, []core.Envelope{env(t, id, base)}, core.InsertOptions{}); err != nil {
			t.Fatal(err)
		}
		for range notifies {
			if err := n.NotifyInsert(c, tx); err != nil {
				t.Fatalf("NotifyInsert: %v", err)
			}
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("rolled-back", 1, false)
	write("committed", 3, true)
	select {
	case <-wakes:
	case <-c.Done():
		t.Fatal("no wake-up after a commit")
	}
	select {
	case <-wakes:
		t.Fatal("a second wake-up: from the rolled-back transaction, or one per notification")
	case <-time.After(quiet):
	}
}

// testWatchStops: Watch returns ctx's error soon after ctx ends, even while
// it waits for a notification (the check is in watcher's cleanup).
func testWatchStops(t *testing.T, tg Target) {
	watcher(t, tg)
}
