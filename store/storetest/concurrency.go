package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// concurrencyTests check claimers on separate pools, as separate processes
// run them, on a database server: four claimers drain 10,000 rows with claim
// + mark done and never share a row; an abandoned batch becomes claimable
// once its lease expires, is reclaimed exactly once, and the abandoning
// owner's late write-backs change nothing.
var concurrencyTests = []test{
	{"DrainDisjoint", testDrainDisjoint},
	{"AbandonedLeaseReclaimedAndFenced", testAbandoned},
	{"DrainFromCursor", testDrainFromCursor},
}

// claimers runs n claimers, each on its own pool, until a claim comes back
// empty. Each claimed event goes to handle (called without locks held), if
// not nil; any event claimed twice is an error.
func claimers(t *testing.T, tg Target, n, batch int, p core.ClaimParams, handle func(c context.Context, db core.DBTX, who string, ev core.Event) error) map[string]string {
	t.Helper()
	c := ctx(t)
	var (
		mu   sync.Mutex
		seen = map[string]string{}
		errs []error
		wg   sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for i := range n {
		db := tg.Reopen(t)
		who := fmt.Sprintf("%s-claimer-%d", p.Owner, i)
		wg.Go(func() {
			p := p
			p.Owner, p.Limit = who, batch
			for {
				evs, bad, err := tg.Store.Claim(c, db, p)
				if err != nil || len(bad) > 0 {
					fail(fmt.Errorf("%s: claim: %v %v", who, err, bad))
					return
				}
				if len(evs) == 0 {
					return
				}
				mu.Lock()
				for _, e := range evs {
					if prev, dup := seen[e.ID()]; dup {
						errs = append(errs, fmt.Errorf("%s claimed by %s and %s", e.ID(), prev, who))
					}
					seen[e.ID()] = who
				}
				mu.Unlock()
				for _, e := range evs {
					if handle == nil {
						break
					}
					if err := handle(c, db, who, e); err != nil {
						fail(fmt.Errorf("%s: %s: %w", who, e.ID(), err))
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i == 20 {
			t.Errorf("... %d errors in all", len(errs))
			break
		}
		t.Error(err)
	}
	return seen
}

func markDone(tg Target, now time.Time) func(c context.Context, db core.DBTX, who string, ev core.Event) error {
	return func(c context.Context, db core.DBTX, who string, ev core.Event) error {
		ok, err := tg.Store.MarkDone(c, db, who, ev.ID(), now)
		if err == nil && !ok {
			err = fmt.Errorf("mark done by the lease holder changed nothing")
		}
		return err
	}
}

func testDrainDisjoint(t *testing.T, tg Target) {
	const n = 10000
	seq(t, tg, "drain", n)
	now := time.Now()
	seen := claimers(t, tg, 4, 50, core.ClaimParams{Owner: "drain", Now: now, LeaseTimeout: time.Hour}, markDone(tg, now))
	if len(seen) != n {
		t.Fatalf("claimed %d distinct events, want %d", len(seen), n)
	}
	if got := count(t, tg, "status = 1"); got != n {
		t.Fatalf("%d rows DONE, want %d", got, n)
	}
	per := map[string]int{}
	for _, who := range seen {
		per[who]++
	}
	t.Logf("rows per claimer: %v", per)
}

func testAbandoned(t *testing.T, tg Target) {
	const n = 1000
	seq(t, tg, "aband", n)
	now := time.Now()
	// A process claims half the rows and dies without a write-back.
	crashed := claim(t, tg, tg.DB, "crashed", now, n/2)
	if len(crashed) != n/2 {
		t.Fatalf("crashed owner claimed %d, want %d", len(crashed), n/2)
	}
	// While its lease is live, the others get only the other half.
	live := claimers(t, tg, 4, 25, core.ClaimParams{Owner: "live", Now: now.Add(30 * time.Second), LeaseTimeout: time.Minute}, markDone(tg, now))
	if len(live) != n/2 {
		t.Fatalf("with a live lease %d rows were claimed, want %d", len(live), n/2)
	}
	for _, e := range crashed {
		if _, taken := live[e.ID()]; taken {
			t.Fatalf("%s was claimed while its lease was live", e.ID())
		}
	}
	// Once the lease expired, the abandoned rows are reclaimed exactly once.
	later := now.Add(2 * time.Minute)
	reclaimed := claimers(t, tg, 4, 25, core.ClaimParams{Owner: "late", Now: later, LeaseTimeout: time.Minute},
		func(context.Context, core.DBTX, string, core.Event) error { return nil })
	if len(reclaimed) != n/2 {
		t.Fatalf("reclaimed %d abandoned rows, want %d", len(reclaimed), n/2)
	}
	// The crashed owner comes back: every write-back is fenced off.
	c := ctx(t)
	for i, e := range crashed {
		var ok bool
		var err error
		switch i % 3 {
		case 0:
			ok, err = tg.Store.MarkDone(c, tg.DB, "crashed", e.ID(), later)
		case 1:
			ok, err = tg.Store.MarkRetry(c, tg.DB, "crashed", e.ID(), later, "stale")
		default:
			ok, err = tg.Store.MarkDead(c, tg.DB, "crashed", e.ID(), later, "stale")
		}
		if err != nil || ok {
			t.Fatalf("stale write-back on %s: changed=%v err=%v", e.ID(), ok, err)
		}
	}
	if got := count(t, tg, "locked_by = 'crashed'"); got != 0 {
		t.Fatalf("%d rows still leased by the crashed owner", got)
	}
	if got := count(t, tg, "status = 0 AND attempts = 0 AND locked_by LIKE 'late-claimer-%'"); got != n/2 {
		t.Fatalf("%d reclaimed rows untouched, want %d", got, n/2)
	}
}

// testDrainFromCursor: claimers on separate pools drain a backlog as the
// poller does, each claim starting where its previous full claim ended
// (ClaimParams.From) and from the oldest row after a short one, while rows
// become claimable behind every cursor: a tenth of the rows fail once and
// are due again at once (RETRY), a tenth are released unprocessed. No row is
// claimed while another claimer holds it, none after it is DONE, and every
// row ends DONE: none is skipped.
func testDrainFromCursor(t *testing.T, tg Target) {
	const n = 5000
	rows := seq(t, tg, "cursor", n)
	c := ctx(t)
	var (
		mu    sync.Mutex
		held  = map[string]string{} // id -> claimer holding it
		done  = map[string]bool{}
		tried = map[string]bool{} // failed or released once already
		errs  []error
		wg    sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for i := range 4 {
		db := tg.Reopen(t)
		who := fmt.Sprintf("cursor-claimer-%d", i)
		wg.Go(func() {
			var from time.Time
			for c.Err() == nil {
				p := core.ClaimParams{Owner: who, Now: time.Now(), LeaseTimeout: time.Hour, Limit: 50, From: from}
				evs, bad, err := tg.Store.Claim(c, db, p)
				if err != nil || len(bad) > 0 {
					fail(fmt.Errorf("%s: claim: %v %v", who, err, bad))
					return
				}
				from = time.Time{}
				if len(evs) == p.Limit {
					from = evs[len(evs)-1].CreatedAt
				}
				mu.Lock()
				if len(evs) == 0 && p.From.IsZero() && len(held) == 0 {
					mu.Unlock()
					return // nothing claimable, nothing held that may become so
				}
				var fails, releases []string
				for _, e := range evs {
					switch {
					case held[e.ID()] != "":
						errs = append(errs, fmt.Errorf("%s claimed by %s while %s held it", e.ID(), who, held[e.ID()]))
					case done[e.ID()]:
						errs = append(errs, fmt.Errorf("%s claimed by %s after it was DONE", e.ID(), who))
					}
					held[e.ID()] = who
					k := e.ID()[len(e.ID())-1]
					switch {
					case tried[e.ID()]:
					case k == '3':
						fails = append(fails, e.ID())
						tried[e.ID()] = true
					case k == '7':
						releases = append(releases, e.ID())
						tried[e.ID()] = true
					}
				}
				mu.Unlock()
				// A retried or released row is claimable again as soon as
				// its write commits: the write runs under mu, so that a
				// claimer taking it then finds it no longer held.
				settle := func(id, what string, write func() (bool, error)) {
					mu.Lock()
					defer mu.Unlock()
					if ok, err := write(); err != nil || !ok {
						errs = append(errs, fmt.Errorf("%s: %s %s: changed=%v err=%v", who, what, id, ok, err))
					}
					delete(held, id)
					if what == "done" {
						done[id] = true
					}
				}
				for _, e := range evs {
					switch id := e.ID(); {
					case slices.Contains(fails, id):
						settle(id, "retry", func() (bool, error) {
							return tg.Store.MarkRetry(c, db, who, id, time.Now(), "fails once")
						})
					case slices.Contains(releases, id):
						settle(id, "release", func() (bool, error) {
							m, err := tg.Store.Release(c, db, who, []string{id})
							return m == 1, err
						})
					default:
						ok, err := tg.Store.MarkDone(c, db, who, id, time.Now())
						settle(id, "done", func() (bool, error) { return ok, err })
					}
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i == 20 {
			t.Errorf("... %d errors in all", len(errs))
			break
		}
		t.Error(err)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("drain did not finish: %v", err)
	}
	for _, id := range rows {
		if !done[id] {
			t.Fatalf("%s was never delivered (%d of %d done)", id, len(done), n)
		}
	}
	if got := count(t, tg, "status = 1"); got != n {
		t.Fatalf("%d rows DONE, want %d", got, n)
	}
	if got := count(t, tg, "status = 1 AND attempts = 1"); got != n/10 {
		t.Errorf("%d rows DONE after one failure, want %d", got, n/10)
	}
}
