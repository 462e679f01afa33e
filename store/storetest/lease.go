package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// leaseTests check the optional lease renewal: core.LeaseRenewer.
var leaseTests = []test{
	{"RenewLeases", testRenewLeases},
	{"RenewLeasesLong", testRenewLeasesLong},
}

// testRenewLeases: a renewal extends the leases the owner holds, so that no
// other claimer takes the rows when the old lease would have expired; a row
// leased by another owner is reported lost and left untouched; terminal,
// released and unknown rows are reported lost; repeated ids count once.
func testRenewLeases(t *testing.T, tg Target) {
	lr, ok := core.StoreAs[core.LeaseRenewer](tg.Store)
	if !ok {
		t.Skipf("%T does not implement core.LeaseRenewer", tg.Store)
	}
	c := ctx(t)
	seq(t, tg, "rl", 5)
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	claim(t, tg, tg.DB, owner, t0, 5)
	// rl-00001 is taken over by another owner, rl-00002 is DONE, rl-00003
	// is released; rl-00000 and rl-00004 stay ours.
	if _, err := tg.DB.ExecContext(c, "UPDATE "+tg.Table+" SET locked_by = 'owner-b' WHERE event_id = 'rl-00001'"); err != nil {
		t.Fatal(err)
	}
	foreign := get(t, tg, "rl-00001")
	mustMark(t)(tg.Store.MarkDone(c, tg.DB, owner, "rl-00002", t0))
	if n, err := tg.Store.Release(c, tg.DB, owner, []string{"rl-00003"}); err != nil || n != 1 {
		t.Fatalf("release: %d %v", n, err)
	}

	if lost, err := lr.RenewLeases(c, tg.DB, owner, nil, t0); err != nil || len(lost) != 0 {
		t.Fatalf("empty renewal: lost=%v err=%v", lost, err)
	}
	const lease = time.Minute // the claim helper's
	t1 := t0.Add(50 * time.Second)
	lost, err := lr.RenewLeases(c, tg.DB, owner, []string{"rl-00000", "rl-00001", "rl-00002", "rl-00003", "rl-00004", "missing", "rl-00000"}, t1)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lost)
	if want := []string{"missing", "rl-00001", "rl-00002", "rl-00003"}; !slices.Equal(lost, want) {
		t.Fatalf("lost = %v, want %v", lost, want)
	}
	for _, id := range []string{"rl-00000", "rl-00004"} {
		if ev := get(t, tg, id); ev.LockedBy != owner || ev.LockedAt.Before(t1) {
			t.Errorf("%s after renewal: locked by %q at %v, want %q at %v or later", id, ev.LockedBy, ev.LockedAt, owner, t1)
		}
	}
	if ev := get(t, tg, "rl-00001"); ev.LockedBy != "owner-b" || !ev.LockedAt.Equal(foreign.LockedAt) {
		t.Errorf("foreign row changed by the renewal: %+v, was %+v", ev, foreign)
	}
	if ev := get(t, tg, "rl-00002"); ev.Status != core.StatusDone || ev.LockedBy != "" {
		t.Errorf("terminal row changed by the renewal: %+v", ev)
	}
	// When the first lease would have expired, another claimer finds only
	// the rows nobody renewed: rl-00003 (released) and rl-00001 (owner-b's
	// lease, from t0, expired too).
	got := ids(claim(t, tg, tg.DB, "owner-c", t0.Add(lease+time.Second), 10))
	slices.Sort(got)
	if want := []string{"rl-00001", "rl-00003"}; !slices.Equal(got, want) {
		t.Fatalf("claim after the old lease expired = %v, want %v", got, want)
	}
	// A renewal after the lease was lost reports it.
	if lost, err := lr.RenewLeases(c, tg.DB, owner, []string{"rl-00003"}, t1); err != nil || !slices.Equal(lost, []string{"rl-00003"}) {
		t.Fatalf("renewal of a lease taken by another claimer: lost=%v err=%v", lost, err)
	}
	// Renewing twice at the same time still reports nothing lost (a store
	// that counts changed rows only must not take an unchanged row as lost).
	for range 2 {
		if lost, err := lr.RenewLeases(c, tg.DB, owner, []string{"rl-00000", "rl-00004"}, t1); err != nil || len(lost) != 0 {
			t.Fatalf("repeated renewal: lost=%v err=%v", lost, err)
		}
	}
}

// testRenewLeasesLong: a list longer than one statement's chunk is renewed
// whole, and its lost ids are found in every chunk.
func testRenewLeasesLong(t *testing.T, tg Target) {
	lr, ok := core.StoreAs[core.LeaseRenewer](tg.Store)
	if !ok {
		t.Skipf("%T does not implement core.LeaseRenewer", tg.Store)
	}
	c := ctx(t)
	const n = 1100
	all := seq(t, tg, "rll", n)
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	claim(t, tg, tg.DB, owner, t0, n)
	gone := []string{all[3], all[700], all[1099]}
	if k, err := tg.Store.Release(c, tg.DB, owner, gone); err != nil || k != 3 {
		t.Fatalf("release: %d %v", k, err)
	}
	lost, err := lr.RenewLeases(c, tg.DB, owner, all, t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lost)
	if !slices.Equal(lost, gone) {
		t.Fatalf("lost = %v, want %v", lost, gone)
	}
	if got := count(t, tg, "locked_by = '"+owner+"'"); got != n-3 {
		t.Errorf("rows still leased = %d, want %d", got, n-3)
	}
}
