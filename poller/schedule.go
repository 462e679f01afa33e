package poller

import (
	"sync"
	"time"
)

const (
	// costShare bounds the share of the claiming time spent by claims that
	// start behind the cursor: such a claim that took d is followed by no
	// other of the same reach for (costShare-1)·d. It steps over the rows
	// between its start and the cursor, delivered or held; on PostgreSQL
	// their dead index entries too, until VACUUM, so a claim from the oldest
	// row costs more the longer a drain has gone on.
	costShare = 20
	// maxCostGap caps that wait, however long the last claim took (one that
	// ran into an outage, say).
	maxCostGap = time.Minute
	// nearReach is the age under which the rows a due claim starts from
	// count as near: such claims step over the rows written since at most.
	nearReach = 2 * time.Second
	// maxDue bounds the due claims kept. Beyond it a new one is dropped: the
	// periodic claim from the oldest row takes its rows, and the loop's pace
	// serves its wake-up.
	maxDue = 4096
)

// schedule is the poller's one answer to "which claim is due next, and
// from where". Claims start at the cursor, the created_at of the newest row
// the claims before took (core.ClaimParams.From), so that they do not step
// again over the rows delivered or held since; rows that become claimable
// behind the cursor are owed a claim that starts behind it, a due claim:
// when its rows become claimable (at) and the creation time of the oldest
// of them where it is known (from), else a claim from the oldest row (a
// head claim) serves it. The sources of due claims are:
//
//   - wake-ups: Wake (a watch notification: another instance, or a writer
//     without a hot path, committed rows, possibly behind the cursor),
//     WakeAt and WakeAtFrom, through which the Handler's NotifyDueFrom (or
//     NotifyDue) reports retries that fall due and events the dispatcher
//     released unsent. A wake-up alone also asks for a poll at its time,
//     before the loop's own pace would run one (nextWake);
//   - refusals: rows the handler refused in a claim, released at once, from
//     the oldest of them;
//   - releases: refused rows whose release failed and then landed (the
//     releaser), from a point not known;
//   - short and failed claims: rows may be waiting behind the cursor (a
//     transaction that committed after younger rows were claimed, a row
//     stamped by a slower clock, an expired lease of a crashed instance), so
//     a head claim is due;
//   - a full claim from behind the cursor: the rows beyond its last one are
//     still owed, from there;
//   - the periodic head claim: Interval after the last one, for whatever the
//     sources above cannot know about.
//
// A claim serves the due claims that were due when it started and whose
// rows it includes (those from its start on; a head claim serves them all).
//
// Claims that start behind the cursor cost more the further back they
// start, so each reach keeps to its share of the claiming time (costShare):
// from a near row (created less than nearReach ago: a row the hot queue
// refused a moment ago), from a far one (a retry of an old event), from the
// oldest row. A costly far or head claim thus never holds back a near one,
// and where claims behind the cursor are cheap (a vacuumed table: a
// millisecond or two) every due claim runs at once.
//
// The schedule also sizes the claims: while they come back full (a
// backlog), each next one asks for twice as many rows, up to MaxBatchSize,
// and waits for room for a whole claim (waitForRoom); a short one returns to
// BatchSize.
//
// docs/design/poller.md says why it is built so; TestCursor and
// TestCursorSimulation pin the behaviour down.
type schedule struct {
	min, max int           // BatchSize, MaxBatchSize
	interval time.Duration // Interval

	mu       sync.Mutex
	due      []dueClaim
	nextWake time.Time       // the earliest at of the due claims that ask for a poll; zero: none
	cursor   time.Time       // where claims start; zero: no claim took a row yet
	size     int             // rows the next claim asks for
	backlog  bool            // the last claim came back full and was held: a backlog drains
	roomMax  int             // the most room the handler ever reported: its queue's size
	spent    [reaches]budget // by reach (not fromCursor): the last claim's start and cost
}

// A dueClaim is owed to rows that become claimable behind the cursor at at:
// rows created at or after from, or anywhere when from is zero.
type dueClaim struct {
	at, from time.Time
	wake     bool // a wake-up that asks for a poll at at; no poll has started since
}

// A reach is where a claim starts.
type reach uint8

const (
	fromCursor reach = iota // the cursor
	fromNear                // a due claim's from, a near row
	fromFar                 // a due claim's from, a far row
	fromOldest              // the oldest row: a head claim
	reaches
)

// A budget is when the last claim of a reach started, and what it took.
type budget struct {
	at   time.Time
	cost time.Duration
}

// allows reports whether a claim of b's reach may run at now: whether it
// keeps to its share of the claiming time.
func (b budget) allows(now time.Time) bool {
	return now.Sub(b.at) >= min(time.Duration(costShare-1)*b.cost, maxCostGap)
}

// A plan is where a claim starts (zero: the oldest row) and how many rows it
// asks for.
type plan struct {
	from  time.Time
	size  int
	reach reach
}

// behind reports whether the claim starts from a due claim's from.
func (p plan) behind() bool { return p.reach == fromNear || p.reach == fromFar }

func newSchedule(cfg Config) *schedule {
	return &schedule{min: cfg.BatchSize, max: cfg.MaxBatchSize, interval: cfg.Interval, size: cfg.BatchSize}
}

// wakeAt records a wake-up: a poll is wanted at at, and rows created at or
// after from (zero: not known) become claimable then. It reports whether at
// is now the earliest poll asked for, so that the loop must recompute its
// wait.
func (s *schedule) wakeAt(at, from time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.add(dueClaim{at: at, from: from, wake: true}) {
		return false
	}
	if s.nextWake.IsZero() || at.Before(s.nextWake) {
		s.nextWake = at
		return true
	}
	return false
}

// released records that the releaser gave back leases at now: their rows
// may lie behind the cursor, from a point not known.
func (s *schedule) released(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.add(dueClaim{at: now})
}

// add appends d, unless maxDue are kept or d is a head claim due at d.at
// that one already owed covers. It reports whether d was added.
func (s *schedule) add(d dueClaim) bool {
	if !d.wake && d.from.IsZero() {
		for _, o := range s.due {
			if !o.wake && o.from.IsZero() && !o.at.After(d.at) {
				return false
			}
		}
	}
	if len(s.due) >= maxDue {
		return false
	}
	s.due = append(s.due, d)
	return true
}

// firstWake returns the earliest time a wake-up asks for a poll at, and
// false if none does.
func (s *schedule) firstWake() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nextWake, !s.nextWake.IsZero()
}

// polling records that a poll starts at now: it serves the wake-ups due by
// then, however many (a burst of Wake calls costs one poll, not one each).
// Their rows stay owed until a claim takes them.
func (s *schedule) polling(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startPoll(now)
}

// startPoll is polling with s.mu held. Head claims owed without a poll
// asked for are kept as one, the earliest: any head claim that serves it
// serves the others.
func (s *schedule) startPoll(now time.Time) {
	s.nextWake = time.Time{}
	var head time.Time
	kept := s.due[:0]
	for _, d := range s.due {
		if d.wake && !d.at.After(now) {
			d.wake = false
		}
		switch {
		case d.wake:
			if s.nextWake.IsZero() || d.at.Before(s.nextWake) {
				s.nextWake = d.at
			}
		case d.from.IsZero():
			if head.IsZero() || d.at.Before(head) {
				head = d.at
			}
			continue
		}
		kept = append(kept, d)
	}
	if !head.IsZero() {
		kept = append(kept, dueClaim{at: head})
	}
	clear(s.due[len(kept):])
	s.due = kept
}

// next returns the plan of a claim starting at now.
func (s *schedule) next(now time.Time) plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.startPoll(now)
	if s.cursor.IsZero() {
		return plan{size: s.size, reach: fromOldest}
	}
	// The oldest from of the due claims of each reach; fromOldest: a head
	// claim is due. Due claims at or ahead of the cursor go: claims from
	// the cursor take their rows.
	var from [reaches]time.Time
	headDue := false
	kept := s.due[:0]
	for _, d := range s.due {
		switch {
		case d.at.After(now):
		case d.from.IsZero():
			headDue = true
		case !d.from.Before(s.cursor):
			continue
		default:
			r := fromFar
			if now.Sub(d.from) < nearReach {
				r = fromNear
			}
			if from[r].IsZero() || d.from.Before(from[r]) {
				from[r] = d.from
			}
		}
		kept = append(kept, d)
	}
	clear(s.due[len(kept):])
	s.due = kept
	for _, r := range []reach{fromNear, fromFar} {
		if !from[r].IsZero() && s.spent[r].allows(now) {
			return plan{from: from[r], size: s.size, reach: r}
		}
	}
	head := s.spent[fromOldest]
	if head.allows(now) && (headDue || now.Sub(head.at) >= s.interval) {
		return plan{size: s.size, reach: fromOldest}
	}
	return plan{from: s.cursor, size: s.size, reach: fromCursor}
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
func (s *schedule) waitForRoom(room int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roomMax = max(s.roomMax, room)
	return s.backlog && room < min(s.size, s.roomMax/2)
}

// failed records a claim started at now that returned an error: the rows it
// may have leased are not known, and the database may be in trouble; the
// next claims start at BatchSize, and a head claim is due. The cost of a
// failed claim says nothing about the next one's, so it is not recorded.
func (s *schedule) failed(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.size = s.min
	s.backlog = false
	s.add(dueClaim{at: now})
}

// done records the outcome of a claim that started at now with p: the
// created_at of the newest row it took (zero if none), and how long it took.
// full: it came back with as many rows as it asked for. held: the poller
// holds every row it took; if not, released is the created_at of the
// oldest row it released (the handler refused it).
func (s *schedule) done(now time.Time, p plan, full, held bool, released, last time.Time, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.reach != fromCursor {
		s.spent[p.reach] = budget{now, took}
	}
	// Short, the claim took every row claimable at now from p.from on;
	// full, those up to last, and a claim behind the cursor goes on from
	// there. A claim from the cursor serves nothing: next dropped the due
	// claims at or ahead of it.
	s.serve(now, p.from)
	if p.behind() {
		if full && held && last.Before(s.cursor) {
			s.add(dueClaim{at: now, from: last})
		}
	} else {
		s.cursorDone(full, held, last, now)
	}
	if !held {
		// Released rows may lie behind the cursor.
		s.add(dueClaim{at: now, from: released})
	}
}

// serve drops the due claims that were due at now, with no poll still
// asked for, from at or after from (zero: all of them).
func (s *schedule) serve(now, from time.Time) {
	kept := s.due[:0]
	for _, d := range s.due {
		if d.wake || d.at.After(now) || d.from.Before(from) {
			kept = append(kept, d)
		}
	}
	clear(s.due[len(kept):])
	s.due = kept
}

// cursorDone moves the cursor and sizes the next claim after a claim from
// the cursor or the oldest row.
func (s *schedule) cursorDone(full, held bool, last, now time.Time) {
	switch {
	case last.IsZero() || !held:
	case full:
		// Rows beyond last are unseen: start there.
		s.cursor = last
	case last.After(s.cursor):
		// A short claim took every row it could: none is claimable
		// between the cursor and last, nor, for a head claim, behind.
		s.cursor = last
	}
	s.backlog = full && held
	switch {
	case full && held:
		s.size = min(s.size*2, s.max)
	case full:
	default:
		// Short: the backlog ahead of the cursor is gone; rows may be
		// waiting behind it.
		s.size = s.min
		s.add(dueClaim{at: now})
	}
}
