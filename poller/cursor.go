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

// maxHeadGap caps the wait for a due claim from the oldest row, however long
// the last one took (a claim that ran into an outage, say).
const maxHeadGap = time.Minute

// cursor decides where each claim starts and how many rows it asks for.
//
// A claim starts at the created_at of the newest row the claims before it
// took (core.ClaimParams.From), not at the oldest pending row: it does not
// step again over the rows delivered or held since, which would make every
// claim slower as a drain goes on (PostgreSQL keeps the dead index entries of
// delivered rows at the head of the pending index until VACUUM). While
// claims come back full (a backlog), each next one asks for twice as many
// rows, up to MaxBatchSize; a claim that comes back short returns to
// BatchSize.
//
// Rows can become claimable behind the cursor: a retry falling due, a
// released lease, an expired lease of a crashed instance, a row whose
// transaction committed after younger rows were claimed, or one stamped by a
// slower clock. None is skipped: a claim from the oldest row (a head claim)
// is due after a claim that came back short or released rows, after a
// wake-up request for a time that has come (the dispatcher asks for one for
// each retry and release), and once Interval has passed since the last head
// claim. A due head claim runs as soon as the last one, which took d, is
// (headScanShare-1)·d old (at most maxHeadGap), so that head claims take at
// most about a twentieth of the claiming time, however many dead entries
// they step over.
// Where that is cheap (a vacuumed table: d is a millisecond or two) every
// due head claim runs at once, and a row behind the cursor waits no longer
// than without one; after a long drain without VACUUM, it waits up to
// max(Interval, min(headScanShare·d, maxHeadGap)).
type cursor struct {
	min, max int           // BatchSize, MaxBatchSize
	interval time.Duration // Interval

	mu       sync.Mutex
	from     time.Time // where claims start; zero: no claim took a row yet
	size     int       // rows the next claim asks for
	headDue  bool      // a claim came back short or released rows
	rewinds  wakeups   // times at which rows become claimable behind from
	headAt   time.Time // when the last head claim started
	headCost time.Duration
	backlog  bool // the last claim came back full and was held: a backlog drains
	roomMax  int  // the most room the handler ever reported: its queue's size
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
	if since < min(time.Duration(headScanShare-1)*c.headCost, maxHeadGap) {
		return c.from, c.size
	}
	if c.headDue || since >= c.interval {
		return time.Time{}, c.size
	}
	if t, ok := c.rewinds.first(); ok && !t.After(now) {
		return time.Time{}, c.size
	}
	return c.from, c.size
}

// waitForRoom reports whether a claim should wait for more room than the
// handler has now (room), rather than claim that much: while a backlog
// drains, until there is room for a whole claim (the size next asks for), or
// for half the handler's queue when that is less. A claim costs the database
// nearly as much for 100 rows as for 500, and with a slow listener the queue
// frees a few slots at a time: claiming whatever room there is would claim
// a fraction of the size, and so many more times, at a higher cost per
// event (docs/BENCHMARKS.md, outbox to broker). The queue still holds at
// least half its size meanwhile, so the workers never wait for the claim.
func (c *cursor) waitForRoom(room int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.roomMax = max(c.roomMax, room)
	return c.backlog && room < min(c.size, c.roomMax/2)
}

// failed records a claim that returned an error: the rows it may have
// leased are not known, and the database may be in trouble; the next claims
// start at BatchSize, and one from the oldest row is due. The cost of a
// failed claim says nothing about the next one's, so it is not recorded.
func (c *cursor) failed() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.size = c.min
	c.headDue = true
	c.backlog = false
}

// done records the outcome of a claim that started at now from from: the
// created_at of the newest row it took (zero if none), and how long it took.
// full: it came back with as many rows as it asked for. held: the poller
// holds every row it took (none was released).
func (c *cursor) done(now, from time.Time, full, held bool, last time.Time, took time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if from.IsZero() {
		c.headAt, c.headCost, c.headDue = now, took, false
		c.rewinds.removeThrough(now)
	}
	if !held {
		// Released rows lie behind the cursor.
		c.headDue = true
	}
	switch {
	case last.IsZero() || !held:
	case full:
		// Rows beyond last are unseen: start there.
		c.from = last
	case last.After(c.from):
		// A short claim took every row it could: none is claimable
		// between the cursor and last, nor, for a head claim, behind.
		c.from = last
	}
	c.backlog = full && held
	switch {
	case full && held:
		c.size = min(c.size*2, c.max)
	case full:
	default:
		// Short: the backlog ahead of the cursor is gone; rows may be
		// waiting behind it.
		c.size = c.min
		c.headDue = true
	}
}
