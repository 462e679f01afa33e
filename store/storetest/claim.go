package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// claimTests check Claim and Release: order, limit, leases, undecodable rows.
var claimTests = []test{
	{"ClaimOrderAndLimit", testClaimOrderAndLimit},
	{"ClaimFrom", testClaimFrom},
	{"ClaimRespectsAvailableAt", testClaimAvailableAt},
	{"ClaimSkipRecent", testClaimSkipRecent},
	{"ClaimLeaseExpiry", testClaimLeaseExpiry},
	{"ClaimRejectsBadParams", testClaimBadParams},
	{"Release", testRelease},
	{"ClaimReportsUndecodableRows", testUndecodable},
	{"ConcurrentClaimersDisjoint", testConcurrentClaimers},
}

func testClaimOrderAndLimit(t *testing.T, tg Target) {
	// Same created_at: ties break on event_id. Inserted out of order.
	insert(t, tg, env(t, "c", base), env(t, "a", base), env(t, "b", base), env(t, "0-early", base.Add(-time.Second)))
	first := claim(t, tg, tg.DB, owner, time.Now(), 3)
	if !slices.Equal(ids(first), []string{"0-early", "a", "b"}) {
		t.Fatalf("first claim = %v, want [0-early a b]", ids(first))
	}
	for _, e := range first {
		if e.LockedBy != owner || e.LockedAt.IsZero() {
			t.Errorf("%s: lease %q %v not returned", e.ID(), e.LockedBy, e.LockedAt)
		}
	}
	second := claim(t, tg, tg.DB, "owner-b", time.Now(), 3)
	if !slices.Equal(ids(second), []string{"c"}) {
		t.Fatalf("second claim = %v, want [c]", ids(second))
	}
	if got := get(t, tg, "a"); got.LockedBy != owner {
		t.Errorf("stored lease = %q, want %q", got.LockedBy, owner)
	}
}

// testClaimFrom: a claim with From leaves out the rows created before it
// and takes those created at it; a claim without From still finds the rows
// left behind.
func testClaimFrom(t *testing.T, tg Target) {
	from := base.Add(time.Second)
	insert(t, tg, env(t, "a", base), env(t, "c", from), env(t, "b", from), env(t, "d", from.Add(time.Microsecond)),
		env(t, "e", from.Add(time.Second)))
	c := ctx(t)
	p := core.ClaimParams{Owner: owner, Now: time.Now(), LeaseTimeout: time.Minute, Limit: 3, From: from}
	evs, bad, err := tg.Store.Claim(c, tg.DB, p)
	if err != nil || len(bad) > 0 {
		t.Fatalf("claim from %v: %v %v", from, err, bad)
	}
	if !slices.Equal(ids(evs), []string{"b", "c", "d"}) {
		t.Fatalf("claim from %v = %v, want [b c d]", from, ids(evs))
	}
	p.From = from.Add(2 * time.Second)
	if evs, _, err := tg.Store.Claim(c, tg.DB, p); err != nil || len(evs) != 0 {
		t.Fatalf("claim from after the last row = %v, %v; want nothing", ids(evs), err)
	}
	p.From = time.Time{}
	if evs, _, err := tg.Store.Claim(c, tg.DB, p); err != nil || !slices.Equal(ids(evs), []string{"a", "e"}) {
		t.Fatalf("claim from the oldest row = %v, %v; want [a e]", ids(evs), err)
	}
}

func testClaimAvailableAt(t *testing.T, tg Target) {
	now := time.Now()
	insert(t, tg, env(t, "now", base), env(t, "later", base, func(s *core.EnvelopeSpec) { s.NotBefore = now.Add(time.Hour) }))
	if got := ids(claim(t, tg, tg.DB, owner, now, 10)); !slices.Equal(got, []string{"now"}) {
		t.Fatalf("claim = %v, want [now]", got)
	}
	mustMark(t)(tg.Store.MarkDone(ctx(t), tg.DB, owner, "now", now))
	if got := ids(claim(t, tg, tg.DB, owner, now.Add(2*time.Hour), 10)); !slices.Equal(got, []string{"later"}) {
		t.Fatalf("claim an hour later = %v, want [later]", got)
	}
}

func testClaimSkipRecent(t *testing.T, tg Target) {
	now := time.Now()
	insert(t, tg, env(t, "old", now.Add(-time.Minute)), env(t, "recent", now.Add(-time.Second)))
	evs, _, err := tg.Store.Claim(ctx(t), tg.DB, core.ClaimParams{Owner: owner, Now: now, LeaseTimeout: time.Minute, SkipRecent: 10 * time.Second, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(evs), []string{"old"}) {
		t.Fatalf("claim = %v, want [old]", ids(evs))
	}
}

func testClaimLeaseExpiry(t *testing.T, tg Target) {
	seq(t, tg, "lease", 2)
	now := time.Now()
	claim(t, tg, tg.DB, owner, now, 2)
	if got := claim(t, tg, tg.DB, "owner-b", now.Add(30*time.Second), 10); len(got) != 0 {
		t.Fatalf("live leases were claimed: %v", ids(got))
	}
	got := claim(t, tg, tg.DB, "owner-b", now.Add(61*time.Second), 10)
	if len(got) != 2 || got[0].LockedBy != "owner-b" {
		t.Fatalf("expired leases: claimed %v", ids(got))
	}
}

func testClaimBadParams(t *testing.T, tg Target) {
	seq(t, tg, "bad", 1)
	for name, p := range map[string]core.ClaimParams{
		"no owner": {Limit: 1, LeaseTimeout: time.Minute},
		"no limit": {Owner: owner, LeaseTimeout: time.Minute},
		"no lease": {Owner: owner, Limit: 1},
	} {
		if _, _, err := tg.Store.Claim(ctx(t), tg.DB, p); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if got := count(t, tg, "locked_by IS NULL"); got != 1 {
		t.Fatalf("a rejected claim changed rows")
	}
}

func testRelease(t *testing.T, tg Target) {
	seq(t, tg, "rel", 3)
	now := time.Now()
	claim(t, tg, tg.DB, owner, now, 3)
	n, err := tg.Store.Release(ctx(t), tg.DB, "someone-else", []string{"rel-00000"})
	if err != nil || n != 0 {
		t.Fatalf("release by non-owner: n=%d err=%v", n, err)
	}
	n, err = tg.Store.Release(ctx(t), tg.DB, owner, []string{"rel-00000", "rel-00001", "missing"})
	if err != nil || n != 2 {
		t.Fatalf("release: n=%d err=%v, want 2", n, err)
	}
	got := claim(t, tg, tg.DB, "owner-b", now, 10)
	if !slices.Equal(ids(got), []string{"rel-00000", "rel-00001"}) {
		t.Fatalf("after release claim = %v", ids(got))
	}
	if ev := get(t, tg, "rel-00000"); ev.Attempts != 0 || ev.Status != core.StatusNew {
		t.Fatalf("release counted an attempt: %+v", ev)
	}
}

func testUndecodable(t *testing.T, tg Target) {
	seq(t, tg, "dec", 2)
	if _, err := tg.DB.ExecContext(ctx(t), "UPDATE "+tg.Table+" SET headers = 'not json' WHERE event_id = 'dec-00000'"); err != nil {
		t.Fatal(err)
	}
	evs, bad, err := tg.Store.Claim(ctx(t), tg.DB, core.ClaimParams{Owner: owner, Now: time.Now(), LeaseTimeout: time.Minute, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(evs), []string{"dec-00001"}) || len(bad) != 1 || bad[0].ID != "dec-00000" {
		t.Fatalf("events %v, bad %v", ids(evs), bad)
	}
	// The bad row is leased to us, so we can mark it dead.
	mustMark(t)(tg.Store.MarkDead(ctx(t), tg.DB, owner, "dec-00000", time.Now(), bad[0].Error()))
}

func testConcurrentClaimers(t *testing.T, tg Target) {
	const n, claimerCount, batch = 2000, 4, 25
	seq(t, tg, "cc", n)
	p := core.ClaimParams{Owner: "cc", Now: time.Now(), LeaseTimeout: time.Hour}
	if seen := claimers(t, tg, claimerCount, batch, p, nil); len(seen) != n {
		t.Fatalf("claimed %d distinct events, want %d", len(seen), n)
	}
}
