package storetest

import (
	"errors"
	"testing"

	"github.com/outboxkit/outbox/core"
)

// lockTests check the named locks of stores that offer them (core.Locker);
// they skip on a store without.
var lockTests = []test{
	{"LockExcludesOtherSessions", testLockExcludes},
}

// testLockExcludes: a lock taken through one pool is refused to another
// pool (another process) until it is released; locks of other names, and of
// other tables, do not contend.
func testLockExcludes(t *testing.T, tg Target) {
	locker, ok := core.StoreAs[core.Locker](tg.Store)
	if !ok {
		t.Skip("the store has no named locks (core.Locker)")
	}
	c := ctx(t)
	other := tg.Reopen(t)

	first, ok, err := locker.TryLock(c, tg.DB, "purge")
	if err != nil || !ok {
		t.Fatalf("first TryLock: ok=%v err=%v, want it taken", ok, err)
	}
	if err := first.Check(c); err != nil {
		t.Fatalf("Check of a held lock: %v", err)
	}
	if l, ok, err := locker.TryLock(c, other, "purge"); err != nil || ok {
		if ok {
			_ = l.Unlock(c)
		}
		t.Fatalf("second TryLock from another pool: ok=%v err=%v, want refused", ok, err)
	}
	relay, ok, err := locker.TryLock(c, other, "relay")
	if err != nil || !ok {
		t.Fatalf("TryLock of another name: ok=%v err=%v, want it taken", ok, err)
	}
	if err := relay.Unlock(c); err != nil {
		t.Fatalf("Unlock: %v", err)
	}

	if err := first.Unlock(c); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if err := first.Unlock(c); err != nil {
		t.Fatalf("second Unlock: %v, want nil (idempotent)", err)
	}
	if err := first.Check(c); !errors.Is(err, core.ErrLockLost) {
		t.Fatalf("Check after Unlock: %v, want core.ErrLockLost", err)
	}
	second, ok, err := locker.TryLock(c, other, "purge")
	if err != nil || !ok {
		t.Fatalf("TryLock after Unlock: ok=%v err=%v, want it taken", ok, err)
	}
	if err := second.Unlock(c); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
}
