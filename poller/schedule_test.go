package poller

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestCursor(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	row := func(s int) time.Time { return t0.Add(-time.Hour + time.Duration(s)*time.Second) }
	// A step is one claim: at is when it starts, relative to t0; it comes
	// back full or not, releasing rows from row(released) on or holding
	// every row (released 0), its last row created at row(last), and took
	// took. want* is where the claim starts (zero: the oldest row), whether
	// from a mark, and how many rows it asks for.
	type step struct {
		at       time.Duration
		wantHead bool
		wantFrom int
		wantMark bool
		wantSize int
		full     bool
		released int
		last     int
		took     time.Duration
		rewind   time.Duration // if not zero: a wake-up request for t0+rewind, before the claim
		mark     int           // with rewind: the request is for rows from row(mark) on
		failed   bool          // the claim returns an error
	}
	ms := time.Millisecond
	tests := []struct {
		name  string
		steps []step
	}{
		{"a backlog grows the claims and moves the start; a short claim ends it", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 1, took: ms},
			{at: 10 * ms, wantFrom: 1, wantSize: 200, full: true, last: 2, took: ms},
			{at: 20 * ms, wantFrom: 2, wantSize: 400, full: true, last: 3, took: ms},
			{at: 30 * ms, wantFrom: 3, wantSize: 800, full: true, last: 4, took: ms},
			{at: 40 * ms, wantFrom: 4, wantSize: 1000, full: true, last: 5, took: ms},
			{at: 50 * ms, wantFrom: 5, wantSize: 1000, full: false, last: 6, took: ms},
			{at: 60 * ms, wantHead: true, wantSize: 100},
		}},
		{"released rows send the next claim to the oldest of them, at the same size", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 5, took: ms},
			{at: 10 * ms, wantFrom: 5, wantSize: 200, full: true, released: 4, last: 6, took: ms},
			{at: 20 * ms, wantFrom: 4, wantMark: true, wantSize: 200, last: 6, took: ms},
			// The mark claim was short: it served the mark; the cursor
			// stayed at 5.
			{at: 40 * ms, wantFrom: 5, wantSize: 200},
		}},
		{"a mark behind the cursor is claimed from, and the cursor stays", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 10, took: 50 * ms},
			// Due later than this claim: not yet.
			{at: 100 * ms, rewind: 200 * ms, mark: 3, wantFrom: 10, wantSize: 200, full: true, last: 11, took: ms},
			// Due; a claim from the mark needs no head claim's share.
			{at: 200 * ms, wantFrom: 3, wantMark: true, wantSize: 400, full: true, last: 4, took: ms},
			// Full: the next mark claim goes on from its last row, once
			// the mark claims' share allows (19 x 1 ms).
			{at: 210 * ms, wantFrom: 11, wantSize: 400, full: true, last: 12, took: ms},
			{at: 221 * ms, wantFrom: 4, wantMark: true, wantSize: 800, last: 5, took: ms},
			{at: 250 * ms, wantFrom: 12, wantSize: 800},
		}},
		{"a costly mark claim keeps to its share of the claiming time", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 10, took: ms},
			{at: 10 * ms, rewind: 10 * ms, mark: 3, wantFrom: 3, wantMark: true, wantSize: 200, full: true, last: 4, took: 100 * ms},
			{at: 200 * ms, wantFrom: 10, wantSize: 200, full: true, last: 11, took: ms},
			{at: 2 * time.Second, wantFrom: 4, wantMark: true, wantSize: 400},
		}},
		{"a mark ahead of the cursor is the cursor's claims' to take", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 10, took: ms},
			{at: 10 * ms, rewind: 10 * ms, mark: 12, wantFrom: 10, wantSize: 200, full: true, last: 11, took: ms},
			{at: 20 * ms, wantFrom: 11, wantSize: 400},
		}},
		{"a head claim serves the marks due", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 10, took: 100 * ms},
			// Short: a head claim is due once its share allows.
			{at: 10 * ms, wantFrom: 10, wantSize: 200, last: 11, took: ms},
			{at: 2 * time.Second, rewind: 2 * time.Second, mark: 3, wantFrom: 3, wantMark: true, wantSize: 100, full: true, last: 4, took: 200 * ms},
			// The mark claims' share does not allow one now; the head
			// claim's does, and it serves the mark.
			{at: 3 * time.Second, wantHead: true, wantSize: 100, last: 12, took: 100 * ms},
			{at: 3500 * ms, wantFrom: 12, wantSize: 100},
		}},
		{"a wake-up request for rows from an unknown point rewinds to the oldest row", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 10, took: ms},
			{at: 30 * ms, rewind: 30 * ms, wantHead: true, wantSize: 200},
		}},
		{"a wake-up request that has come rewinds, once the head claim's share allows", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 1, took: 20 * ms},
			// Due later than this claim: not yet.
			{at: 50 * ms, rewind: 300 * ms, wantFrom: 1, wantSize: 200, full: true, last: 2, took: ms},
			// Due, but the last head claim (20 ms) was less than 19 x 20 ms ago.
			{at: 300 * ms, wantHead: false, wantFrom: 2, wantSize: 400, full: true, last: 3, took: ms},
			{at: 400 * ms, wantHead: true, wantSize: 800, full: true, last: 1, took: 10 * ms},
			// Served by the head claim: no rewind again.
			{at: 800 * ms, wantFrom: 1, wantSize: 1000, full: true, last: 4, took: ms},
		}},
		{"a backlog that lasts goes back to the oldest row every interval", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 1, took: ms},
			{at: 4 * time.Second, wantFrom: 1, wantSize: 200, full: true, last: 2, took: ms},
			{at: 5 * time.Second, wantHead: true, wantSize: 400, full: true, last: 3, took: ms},
			{at: 6 * time.Second, wantFrom: 3, wantSize: 800},
		}},
		{"a costly head claim is made rarer than the interval", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 1, took: time.Second},
			{at: 6 * time.Second, wantFrom: 1, wantSize: 200, full: true, last: 2, took: ms},
			{at: 19 * time.Second, wantHead: true, wantSize: 400},
		}},
		{"after a short claim, claims go on from the cursor until a costly head claim's share allows one", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 1, took: 100 * ms},
			{at: 200 * ms, wantFrom: 1, wantSize: 200, full: false, last: 2, took: ms},
			{at: time.Second, wantFrom: 2, wantSize: 100, full: false, took: ms},
			{at: 2 * time.Second, wantHead: true, wantSize: 100, full: false, last: 1, took: 100 * ms},
			// A short head claim leaves the cursor where it was.
			{at: 2100 * ms, wantFrom: 2, wantSize: 100},
		}},
		{"a failed claim ends the backlog; its duration is not a head claim's cost", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 1, took: ms},
			{at: 10 * ms, wantFrom: 1, wantSize: 200, failed: true},
			{at: 20 * ms, wantHead: true, wantSize: 100, failed: true},
			{at: 40 * ms, wantHead: true, wantSize: 100},
		}},
		{"a head claim that took very long delays the next one by maxCostGap at most", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, last: 1, took: 30 * time.Second},
			{at: 59 * time.Second, wantFrom: 1, wantSize: 200, full: false, last: 2, took: ms},
			{at: time.Minute, wantHead: true, wantSize: 100},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newSchedule(Config{BatchSize: 100, MaxBatchSize: 1000, Interval: 5 * time.Second})
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				if s.rewind != 0 {
					var from time.Time
					if s.mark != 0 {
						from = row(s.mark)
					}
					c.wakeAt(t0.Add(s.rewind), from)
				}
				p := c.next(now)
				want := time.Time{}
				if !s.wantHead {
					want = row(s.wantFrom)
				}
				if !p.from.Equal(want) || p.behind() != s.wantMark || p.size != s.wantSize {
					t.Fatalf("step %d: claim from %v (mark %v) size %d, want from %v (mark %v) size %d",
						i, p.from, p.behind(), p.size, want, s.wantMark, s.wantSize)
				}
				if s.failed {
					c.failed(now)
					continue
				}
				var last, released time.Time
				if s.last != 0 {
					last = row(s.last)
				}
				if s.released != 0 {
					released = row(s.released)
				}
				c.done(now, p, s.full, s.released == 0, released, last, s.took)
			}
		})
	}
}

// TestCursorSimulation drives the cursor against a simulated table: rows
// are written at the time of their write or late (a transaction that
// commits after younger rows were claimed), leased rows are released (by
// the dispatcher, which marks them, or as refused by the handler), and each
// claim takes up to its size of the claimable rows from where the cursor
// says, costing more the further back it starts (a short claim walks to
// the end of the pending rows). Every row must be claimed in the end (no
// row skipped); a row released within a second of its write (the hot queue
// was full), whose creation time the cursor is told, within two seconds,
// although the interval is an hour and claims from the oldest row cost
// seconds (and so run a minute apart); and any released row within
// maxCostGap and two claims. (With one share for near and far marks, the
// first bound was missed by up to 3.4 s; without marks it would be a
// minute.)
func TestCursorSimulation(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			simulateCursor(t, rand.New(rand.NewPCG(seed, 1)))
		})
	}
}

func simulateCursor(t *testing.T, rng *rand.Rand) {
	type row struct {
		created  time.Time
		leased   bool
		released time.Time // zero: not since its last claim
		fresh    bool      // released within a second of its write
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	var rows []*row // in created_at order
	insert := func(r *row) {
		i, _ := slices.BinarySearchFunc(rows, r.created, func(a *row, t time.Time) int { return a.created.Compare(t) })
		rows = slices.Insert(rows, i, r)
	}
	c := newSchedule(Config{BatchSize: 10, MaxBatchSize: 80, Interval: time.Hour})
	// The longest a released row waited for its claim, fresh or any.
	var worstFresh, worst time.Duration
	var costliest time.Duration
	claim := func() {
		p := c.next(now)
		var took []*row
		var oldestReleased time.Time
		back := 0 // claimable or not, rows the claim steps over before its first
		start, _ := slices.BinarySearchFunc(rows, p.from, func(a *row, t time.Time) int { return a.created.Compare(t) })
		for _, r := range rows[start:] {
			if r.leased {
				back++
				continue
			}
			if len(took) == p.size {
				break
			}
			took = append(took, r)
		}
		// Each row a claim steps over costs it 2 µs; from the oldest row
		// it costs seconds, as after a long drain without VACUUM.
		cost := time.Millisecond + time.Duration(back)*2*time.Microsecond
		if p.from.IsZero() {
			cost = 3 * time.Second
		}
		var last time.Time
		held := true
		for _, r := range took {
			if !r.released.IsZero() {
				worst = max(worst, now.Sub(r.released))
				if r.fresh {
					worstFresh = max(worstFresh, now.Sub(r.released))
				}
				r.released, r.fresh = time.Time{}, false
			}
			r.leased = true
			last = r.created
			if rng.IntN(50) == 0 { // the handler refuses it
				r.leased = false
				if held || r.created.Before(oldestReleased) {
					oldestReleased = r.created
				}
				held = false
				r.released = now
			}
		}
		costliest = max(costliest, cost)
		c.done(now, p, len(took) == p.size, held, oldestReleased, last, cost)
		now = now.Add(cost)
	}
	for step := range 3000 {
		switch n := rng.IntN(10); {
		case n < 6: // writes, one in ten of them late
			for range rng.IntN(20) {
				created := now
				if rng.IntN(10) == 0 {
					created = now.Add(-time.Duration(rng.IntN(2000)) * time.Millisecond)
				}
				insert(&row{created: created})
			}
		case n < 8 && len(rows) > 0:
			// The dispatcher releases a leased row: one it was given at
			// its write (the hot queue is full) or any (a retry).
			i := rng.IntN(len(rows))
			if rng.IntN(2) == 0 {
				i = len(rows) - 1 - rng.IntN(min(len(rows), 20))
			}
			if r := rows[i]; r.leased {
				r.leased = false
				r.released = now
				r.fresh = now.Sub(r.created) < time.Second
				c.wakeAt(now, r.created)
			}
		default:
		}
		claim()
		now = now.Add(time.Millisecond)
		if step%500 == 499 {
			// Delivered rows leave the table now and then (a purge).
			rows = slices.DeleteFunc(rows, func(r *row) bool { return r.leased && rng.IntN(2) == 0 })
		}
	}
	// No more writes: every row gets claimed. Between idle polls time
	// passes (BusyInterval, Interval, wake-ups).
	for range 10000 {
		pending := slices.ContainsFunc(rows, func(r *row) bool { return !r.leased })
		if !pending {
			break
		}
		claim()
		now = now.Add(100 * time.Millisecond)
	}
	if i := slices.IndexFunc(rows, func(r *row) bool { return !r.leased }); i >= 0 {
		t.Fatalf("row created at %v never claimed", rows[i].created.Sub(t0))
	}
	t.Logf("released rows waited at most %v (released at their write: %v)", worst, worstFresh)
	if worstFresh > 2*time.Second {
		t.Errorf("a row released at its write waited %v for its claim, want at most 2 s", worstFresh)
	}
	if limit := maxCostGap + 2*costliest; worst > limit {
		t.Errorf("a released row waited %v for its claim, want at most %v", worst, limit)
	}
}
