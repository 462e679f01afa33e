package poller

import (
	"testing"
	"time"
)

func TestCursor(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	row := func(s int) time.Time { return t0.Add(-time.Hour + time.Duration(s)*time.Second) }
	// A step is one claim: at is when it starts, relative to t0; it comes
	// back full or not, holding every row or not, its last row created at
	// row(last), and took took. want* is where the claim starts (zero: the
	// oldest row) and how many rows it asks for.
	type step struct {
		at         time.Duration
		wantHead   bool
		wantFrom   int
		wantSize   int
		full, held bool
		last       int
		took       time.Duration
		rewind     time.Duration // if not zero: a wake-up request for t0+rewind, before the claim
		failed     bool          // the claim returns an error
	}
	ms := time.Millisecond
	tests := []struct {
		name  string
		steps []step
	}{
		{"a backlog grows the claims and moves the start; a short claim ends it", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, held: true, last: 1, took: ms},
			{at: 10 * ms, wantFrom: 1, wantSize: 200, full: true, held: true, last: 2, took: ms},
			{at: 20 * ms, wantFrom: 2, wantSize: 400, full: true, held: true, last: 3, took: ms},
			{at: 30 * ms, wantFrom: 3, wantSize: 800, full: true, held: true, last: 4, took: ms},
			{at: 40 * ms, wantFrom: 4, wantSize: 1000, full: true, held: true, last: 5, took: ms},
			{at: 50 * ms, wantFrom: 5, wantSize: 1000, full: false, held: true, last: 6, took: ms},
			{at: 60 * ms, wantHead: true, wantSize: 100},
		}},
		{"released rows send the next claim to the oldest row, at the same size", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, held: true, last: 1, took: ms},
			{at: 10 * ms, wantFrom: 1, wantSize: 200, full: true, held: false, last: 2, took: ms},
			{at: 20 * ms, wantHead: true, wantSize: 200},
		}},
		{"a wake-up request that has come rewinds, once the head claim's share allows", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, held: true, last: 1, took: 20 * ms},
			// Due later than this claim: not yet.
			{at: 50 * ms, rewind: 300 * ms, wantFrom: 1, wantSize: 200, full: true, held: true, last: 2, took: ms},
			// Due, but the last head claim (20 ms) was less than 19 x 20 ms ago.
			{at: 300 * ms, wantHead: false, wantFrom: 2, wantSize: 400, full: true, held: true, last: 3, took: ms},
			{at: 400 * ms, wantHead: true, wantSize: 800, full: true, held: true, last: 1, took: 10 * ms},
			// Served by the head claim: no rewind again.
			{at: 800 * ms, wantFrom: 1, wantSize: 1000, full: true, held: true, last: 4, took: ms},
		}},
		{"a backlog that lasts goes back to the oldest row every interval", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, held: true, last: 1, took: ms},
			{at: 4 * time.Second, wantFrom: 1, wantSize: 200, full: true, held: true, last: 2, took: ms},
			{at: 5 * time.Second, wantHead: true, wantSize: 400, full: true, held: true, last: 3, took: ms},
			{at: 6 * time.Second, wantFrom: 3, wantSize: 800},
		}},
		{"a costly head claim is made rarer than the interval", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, held: true, last: 1, took: time.Second},
			{at: 6 * time.Second, wantFrom: 1, wantSize: 200, full: true, held: true, last: 2, took: ms},
			{at: 19 * time.Second, wantHead: true, wantSize: 400},
		}},
		{"after a short claim, claims go on from the cursor until a costly head claim's share allows one", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, held: true, last: 1, took: 100 * ms},
			{at: 200 * ms, wantFrom: 1, wantSize: 200, full: false, held: true, last: 2, took: ms},
			{at: time.Second, wantFrom: 2, wantSize: 100, full: false, held: true, took: ms},
			{at: 2 * time.Second, wantHead: true, wantSize: 100, full: false, held: true, last: 1, took: 100 * ms},
			// A short head claim leaves the cursor where it was.
			{at: 2100 * ms, wantFrom: 2, wantSize: 100},
		}},
		{"a failed claim ends the backlog; its duration is not a head claim's cost", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, held: true, last: 1, took: ms},
			{at: 10 * ms, wantFrom: 1, wantSize: 200, failed: true},
			{at: 20 * ms, wantHead: true, wantSize: 100, failed: true},
			{at: 40 * ms, wantHead: true, wantSize: 100},
		}},
		{"a head claim that took very long delays the next one by maxHeadGap at most", []step{
			{at: 0, wantHead: true, wantSize: 100, full: true, held: true, last: 1, took: 30 * time.Second},
			{at: 59 * time.Second, wantFrom: 1, wantSize: 200, full: false, held: true, last: 2, took: ms},
			{at: time.Minute, wantHead: true, wantSize: 100},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCursor(Config{BatchSize: 100, MaxBatchSize: 1000, Interval: 5 * time.Second})
			for i, s := range tt.steps {
				now := t0.Add(s.at)
				if s.rewind != 0 {
					c.rewindAt(t0.Add(s.rewind))
				}
				from, size := c.next(now)
				want := time.Time{}
				if !s.wantHead {
					want = row(s.wantFrom)
				}
				if !from.Equal(want) || size != s.wantSize {
					t.Fatalf("step %d: claim from %v size %d, want from %v size %d", i, from, size, want, s.wantSize)
				}
				if s.failed {
					c.failed()
					continue
				}
				var last time.Time
				if s.last != 0 {
					last = row(s.last)
				}
				c.done(now, from, s.full, s.held, last, s.took)
			}
		})
	}
}
