package poller

import (
	"sync"
	"time"
)

// headScanShare bounds the share of the claims' time spent walking the
// pending rows from the oldest one while a backlog drains: a claim from the
// oldest row that took d is followed by claims from the cursor for at least
// (headScanShare-1)·d. On PostgreSQL such a claim steps over every dead index
// entry the drain has left (until VACUUM), so its cost grows with the drain.
const headScanShare = 20

// cursor decides where each claim starts and how many rows it asks for.
//
// While claims come back full (a backlog), each next claim starts at the
// created_at of the last row the previous one took (core.ClaimParams.From)
// and asks for twice as many rows, up to MaxBatchSize. Starting there, the
// claim does not step over the rows delivered or held since, which would
// make every claim slower as a drain goes on (PostgreSQL keeps the dead
// index entries of delivered rows at the head of the pending index until
// VACUUM). A claim that comes back short ends the backlog: the next one
// starts from the oldest pending row again, with BatchSize.
//
// Rows can become claimable behind the cursor: a retry falling due, a
// released lease, an expired lease of a crashed instance, a row whose
// transaction committed after younger rows were claimed, or one stamped by a
// slower clock. None is skipped: the next claim that comes back short
// starts from the oldest row, and so does, during a backlog, the first claim
// after a wake-up request for a time that has come (the dispatcher asks for
// one for each retry and release), and any claim once Interval has passed
// since the last one from the oldest row; the latter two at most as often as
// headScanShare allows. During a backlog that lasts, such a row therefore
// waits at most about max(Interval, headScanShare times the cost of a claim
// from the oldest row).
type cursor struct {
	min, max int           // BatchSize, MaxBatchSize
	interval time.Duration // Interval

	mu       sync.Mutex
	from     time.Time // where the next claim starts; zero: the oldest row
	size     int       // rows the next claim asks for
	rewinds  wakeups   // times at which rows become claimable behind from
	headAt   time.Time // when the last claim from the oldest row started
	headCost time.Duration
}

func newCursor(cfg Config) *cursor {
	return &cursor{min: cfg.BatchSize, max: cfg.MaxBatchSize, interval: cfg.Interval, size: cfg.BatchSize}
}

// rewindAt records that rows may become claimable behind the cursor at t.
func (c *cursor) rewindAt(t time.Time) {
	c.mu.Lock()
	c.rewinds.add(t)
	c.mu.Unlock()
}

// next returns where a claim starting at now begins (zero: the oldest row)
// and how many rows it asks for.
func (c *cursor) next(now time.Time) (from time.Time, size int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.from.IsZero() {
		return time.Time{}, c.size
	}
	since := now.Sub(c.headAt)
	if since >= time.Duration(headScanShare-1)*c.headCost {
		if since >= c.interval {
			return time.Time{}, c.size
		}
		if t, ok := c.rewinds.first(); ok && !t.After(now) {
			return time.Time{}, c.size
		}
	}
	return c.from, c.size
}

// done records the outcome of a claim that started at now from from: the
// created_at of the last row it took (zero if none), and how long it took.
// full: it came back with as many rows as it asked for. held: the poller
// holds every row it took (none was released).
func (c *cursor) done(now, from time.Time, full, held bool, last time.Time, took time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if from.IsZero() {
		c.headAt, c.headCost = now, took
		c.rewinds.removeThrough(now)
	}
	switch {
	case full && held && !last.IsZero():
		c.from = last
		c.size = min(c.size*2, c.max)
	case full && !last.IsZero():
		// Rows were released behind: start from the oldest row again.
		c.from = time.Time{}
	default:
		c.from = time.Time{}
		c.size = c.min
	}
}
