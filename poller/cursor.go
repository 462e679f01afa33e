package poller

import (
	"slices"
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
// is due after a claim that came back short, after a wake-up request for a
// time that has come whose rows' creation time is not known (see marks
// below), and once Interval has passed since the last head claim. A due head claim runs as soon as the last one, which took d, is
// (headScanShare-1)·d old (at most maxHeadGap), so that head claims take at
// most about a twentieth of the claiming time, however many dead entries
// they step over.
// Where that is cheap (a vacuumed table: d is a millisecond or two) every
// due head claim runs at once, and a row behind the cursor waits no longer
// than without one; after a long drain without VACUUM, it waits up to
// max(Interval, min(headScanShare·d, maxHeadGap)).
//
// Where the creation time of the rows that fall due behind the cursor is
// known (the dispatcher reports it for each retry and each event it
// releases; the poller knows it for rows the handler refused), a mark
// records it, and a claim from the oldest due mark (a mark claim)
// takes them without a walk from the oldest row: its cost is the rows since
// the mark, which for an event released a moment ago is next to nothing.
// Mark claims keep a share of the claiming time, as head claims do, so that
// a mark far back (a retry of an old event) costs no more than a head claim
// would. Near marks (rows created less than nearMark ago) and far ones keep
// shares of their own: a claim from a near mark walks the rows written since
// at most, and a costly claim from a far mark does not hold it back.
type cursor struct {
	min, max int           // BatchSize, MaxBatchSize
	interval time.Duration // Interval

	mu      sync.Mutex
	from    time.Time // where claims start; zero: no claim took a row yet
	size    int       // rows the next claim asks for
	headDue bool      // a claim came back short
	rewinds wakeups   // times at which rows become claimable behind from, from where unknown
	marks   []mark    // rows that become claimable, from where known
	head    budget    // of the head claims
	near    budget    // of the claims from near marks
	far     budget    // of the claims from far marks
	backlog bool      // the last claim came back full and was held: a backlog drains
	roomMax int       // the most room the handler ever reported: its queue's size
}

// A mark records that rows created at or after from become claimable at
// due.
type mark struct{ due, from time.Time }

// nearMark is the age under which a mark's rows count as near.
const nearMark = 2 * time.Second

// A budget is when the last claim of a kind started, and what it took.
type budget struct {
	at   time.Time
	cost time.Duration
}

// A plan is where a claim starts and how many rows it asks for.
type plan struct {
	from time.Time // zero: the oldest row
	size int
	mark bool // a mark claim: from lies behind the cursor
	near bool // a claim from a near mark
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

// markFrom records that rows created at or after from become claimable at
// t; a zero from is rewindAt(t).
func (c *cursor) markFrom(t, from time.Time) {
	c.mu.Lock()
	c.addMark(t, from)
	c.mu.Unlock()
}

// addMark adds a mark, or, with a zero from or beyond maxWakeups marks, a
// rewind to the oldest row.
func (c *cursor) addMark(t, from time.Time) {
	if from.IsZero() || len(c.marks) >= maxWakeups {
		c.rewinds.add(t)
		return
	}
	c.marks = append(c.marks, mark{due: t, from: from})
}

// allows reports whether a claim of b's kind (behind the cursor) may run at
// now: whether it keeps to its share of the claiming time.
func (b budget) allows(now time.Time) bool {
	return now.Sub(b.at) >= min(time.Duration(headScanShare-1)*b.cost, maxHeadGap)
}

// next returns the plan of a claim starting at now.
func (c *cursor) next(now time.Time) plan {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.from.IsZero() {
		return plan{size: c.size}
	}
	near, far := c.dueMarks(now)
	switch {
	case !near.IsZero() && c.near.allows(now):
		return plan{from: near, size: c.size, mark: true, near: true}
	case !far.IsZero() && c.far.allows(now):
		return plan{from: far, size: c.size, mark: true}
	case !c.head.allows(now):
		return plan{from: c.from, size: c.size}
	}
	if c.headDue || now.Sub(c.head.at) >= c.interval {
		return plan{size: c.size}
	}
	if t, ok := c.rewinds.first(); ok && !t.After(now) {
		return plan{size: c.size}
	}
	return plan{from: c.from, size: c.size}
}

// dueMarks returns the oldest from of the near marks and of the far marks
// due at now that lie behind the cursor (zero: none). Due marks at or ahead
// of it are dropped: claims from the cursor take their rows.
func (c *cursor) dueMarks(now time.Time) (near, far time.Time) {
	kept := c.marks[:0]
	for _, m := range c.marks {
		due := !m.due.After(now)
		if due && !m.from.Before(c.from) {
			continue
		}
		kept = append(kept, m)
		if !due {
			continue
		}
		oldest := &far
		if now.Sub(m.from) < nearMark {
			oldest = &near
		}
		if oldest.IsZero() || m.from.Before(*oldest) {
			*oldest = m.from
		}
	}
	clear(c.marks[len(kept):])
	c.marks = kept
	return near, far
}

// waitForRoom reports whether a claim should wait for more room than the
// handler has now (room), rather than claim that much: while a backlog
// drains, until there is room for a whole claim (the size next asks for), or
// for half the handler's queue when that is less. A claim costs the database
// nearly as much for 100 rows as for 500, and with a slow listener the queue
// frees a few slots at a time: claiming whatever room there is would claim
// a fraction of the size, and so many more times, at a higher cost per
// event (docs/benchmarks.md#outbox-to-broker). The queue still holds at
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

// done records the outcome of a claim that started at now with p: the
// created_at of the newest row it took (zero if none), and how long it took.
// full: it came back with as many rows as it asked for. held: the poller
// holds every row it took; if not, released is the created_at of the
// oldest row it released (the handler refused it).
func (c *cursor) done(now time.Time, p plan, full, held bool, released, last time.Time, took time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.mark {
		c.markDone(now, p, full, held, last, took)
	} else {
		c.cursorDone(now, p, full, held, last, took)
	}
	if !held {
		// Released rows may lie behind the cursor.
		c.addMark(now, released)
	}
}

// cursorDone records the outcome of a claim from the cursor or the oldest
// row.
func (c *cursor) cursorDone(now time.Time, p plan, full, held bool, last time.Time, took time.Duration) {
	if p.from.IsZero() {
		c.head, c.headDue = budget{now, took}, false
		c.rewinds.removeThrough(now)
		// The rows of the marks due by now were claimable at now: the
		// head claim took them, or they lie beyond a full claim's last
		// row, ahead of the cursor.
		c.dropMarks(now, time.Time{})
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

// markDone records the outcome of a mark claim: the marks it served go, and
// a full one leaves a mark at its last row, from which the next mark claim
// goes on. The cursor stays where it is.
func (c *cursor) markDone(now time.Time, p plan, full, held bool, last time.Time, took time.Duration) {
	if p.near {
		c.near = budget{now, took}
	} else {
		c.far = budget{now, took}
	}
	// Short, it took every row claimable at now from p.from on; full, it
	// goes on from last, unless the rows beyond last are the cursor's
	// claims', or the handler refused rows, which done marks.
	c.dropMarks(now, p.from)
	if full && held && last.Before(c.from) {
		c.addMark(now, last)
	}
}

// dropMarks drops the marks due by now from at or after from (zero: all of
// them due by now).
func (c *cursor) dropMarks(now, from time.Time) {
	c.marks = slices.DeleteFunc(c.marks, func(m mark) bool {
		return !m.due.After(now) && !m.from.Before(from)
	})
}
