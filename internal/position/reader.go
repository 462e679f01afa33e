package position

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/lifecycle"
	"github.com/outboxkit/outbox/internal/watch"
	"github.com/outboxkit/outbox/outboxlog"
)

// Handler is the dispatcher as the reader sees it.
type Handler interface {
	EnqueueCold(ev core.Event) bool
	ColdCapacity() int
	Owner() string
}

// Config configures a Reader.
type Config struct {
	Log     Log
	Store   core.Store // the table's store, for the wrapper's claim-path writes
	DB      core.DBTX  // the pool
	Handler Handler
	// Active, when set, reports whether this process is the table's
	// reader (the single-active gate); nil: always.
	Active func() bool
	// Interval is the pause between reads that found nothing. Default
	// 50 ms.
	Interval time.Duration
	// BatchSize caps one read. Default 500.
	BatchSize int
	// SaveEvery is the least time between two saves of the position by
	// the reading cycles (closing and Flush save at once). A commit the
	// reader is woken for makes a cycle; saving after each would write the
	// position table per commit where the reader delivers (ordered
	// events), on SQLite's one connection too. After a kill, what was
	// resolved since the last save is delivered again. Default Interval.
	SaveEvery time.Duration
	// HotMax bounds the positions the hot path holds at once; beyond it
	// the reader delivers. Default 10,000.
	HotMax int
	// CycleTimeout bounds each cycle's statements (take over, read, save),
	// so that a connection the network stopped carrying without closing it
	// cannot hold the reader for ever, as Poller.ClaimTimeout bounds a
	// claim. Default 30 s.
	CycleTimeout time.Duration
	// NoWatch: do not LISTEN for the table's wake-ups (core.WakeSource,
	// PostgreSQL) on a dedicated connection; read every Interval only.
	NoWatch bool
	// Ordering: the aggregate types whose events are delivered in order per
	// key (keys.go).
	Ordering core.Ordering
	// OrderedMax bounds the events of ordered aggregate types held in
	// memory behind their keys' heads; at it, the reader reads no new rows
	// (it still reads its gaps again) until heads resolve. Default 10,000.
	OrderedMax int
	// Logger receives the reader's logs; nil: outboxlog.Default().
	Logger *slog.Logger
	Now    func() time.Time
}

// Reader delivers a table's STREAM rows in position order from its
// persisted position, and wraps the store so that the dispatcher's
// outcomes of those events resolve positions instead of writing rows.
type Reader struct {
	cfg   Config
	t     *tracker
	keys  *keys
	owner string // the lease owner of the events the reader hands over
	loop  lifecycle.Loop
	wake  chan struct{}
	log   *slog.Logger

	// waitsForRoom: the last cycle read less than it could because the
	// cold queue was full (the reader's goroutine only).
	waitsForRoom bool

	// cycled is closed once the first cycle has run, or the reading
	// goroutine has stopped (FirstCycle).
	cycledOnce, cycledMake sync.Once
	cycled                 chan struct{}

	saveMu  sync.Mutex
	saved   State     // the last state written
	savedAt time.Time // when a cycle last saved (the reader's goroutine only)
}

// roomWait is the pause before the next read while a backlog waits for
// room in the dispatcher's cold queue.
const roomWait = 5 * time.Millisecond

// New returns a Reader; cfg.Log, Store and DB are required, and Handler,
// which may be set later with SetHandler, before Start.
func New(cfg Config) (*Reader, error) {
	if cfg.Log == nil || cfg.Store == nil || cfg.DB == nil {
		return nil, core.Invalid("position reader config", "Log, Store and DB are required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = 50 * time.Millisecond
	}
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 500
	}
	if cfg.SaveEvery <= 0 {
		cfg.SaveEvery = cfg.Interval
	}
	if cfg.HotMax <= 0 {
		cfg.HotMax = 10_000
	}
	if cfg.CycleTimeout <= 0 {
		cfg.CycleTimeout = 30 * time.Second
	}
	if cfg.OrderedMax <= 0 {
		cfg.OrderedMax = 10_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Reader{cfg: cfg, t: newTracker(cfg.HotMax), keys: newKeys(), wake: make(chan struct{}, 1), log: outboxlog.Or(cfg.Logger)}
	if cfg.Handler != nil {
		r.SetHandler(cfg.Handler)
	}
	return r, nil
}

// SetActive sets the single-active gate's report of whether this process
// is the table's reader; call it before Start.
func (r *Reader) SetActive(active func() bool) { r.cfg.Active = active }

// SetHandler sets the dispatcher the reader hands events to, when it was
// built with the reader's Store; call it before Start.
func (r *Reader) SetHandler(h Handler) {
	r.cfg.Handler = h
	r.owner = h.Owner() + "/position"
}

// Owner is the lease owner of the events the reader hands to the
// dispatcher: no row carries it.
func (r *Reader) Owner() string { return r.owner }

// Start starts the reading goroutine.
func (r *Reader) Start(ctx context.Context) error {
	if r.cfg.Handler == nil {
		return core.Invalid("position reader", "no Handler: call SetHandler before Start")
	}
	return r.loop.Start(ctx, r.run)
}

// Close stops reading and saves the position. Outcomes that land after it
// (the dispatcher drains after the reader stopped) are saved by Flush.
func (r *Reader) Close(ctx context.Context) error { return r.loop.Close(ctx) }

// Flush saves the position once more, after the dispatcher drained: the
// outcomes of the drain then need no second delivery after a restart.
func (r *Reader) Flush(ctx context.Context) error {
	if !r.live() {
		return nil
	}
	if err := r.passAhead(ctx); err != nil {
		return err
	}
	return r.save(ctx)
}

// passAhead reads on from the cursor over the positions the hot path
// delivered before a read reached them, which only memory knows: a reader
// taking over from the saved position would deliver them again.
func (r *Reader) passAhead(ctx context.Context) error {
	for r.t.aheadCount() > 0 {
		_, cursor, _ := r.t.lag()
		rows, tok, err := r.cfg.Log.ReadKeysAfter(ctx, r.cfg.DB, cursor, r.cfg.BatchSize)
		if err != nil {
			return err
		}
		got := make([]int64, len(rows))
		for i, row := range rows {
			got[i] = row.Pos
		}
		if len(rows) == 0 || !r.t.passAhead(got, tok) {
			return nil
		}
	}
	return nil
}

func (r *Reader) live() bool {
	r.t.mu.Lock()
	defer r.t.mu.Unlock()
	return r.t.live
}

// Wake makes the reader read at once.
func (r *Reader) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Reader) active() bool { return r.cfg.Active == nil || r.cfg.Active() }

func (r *Reader) run(ctx context.Context, stop <-chan struct{}) {
	defer r.markCycled()
	if src, ok := core.StoreAs[core.WakeSource](r.cfg.Store); ok && !r.cfg.NoWatch {
		wctx, cancelWatch := context.WithCancel(ctx)
		var watching sync.WaitGroup
		watching.Go(func() { r.watch(wctx, src) })
		defer func() {
			cancelWatch()
			watching.Wait()
		}()
	}
	backoff := r.cfg.Interval
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-stop:
			if r.live() {
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				if err := r.save(sctx); err != nil {
					r.log.WarnContext(ctx, "outbox position reader: last save failed; the events delivered since the previous one are delivered again after a restart",
						outboxlog.Err(err))
				}
				cancel()
			}
			return
		case <-timer.C:
		case <-r.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CycleTimeout)
		full, err := r.cycle(cctx)
		cancel()
		r.markCycled()
		next := r.cfg.Interval
		switch {
		case err == nil && r.waitsForRoom:
			// A backlog waits for room in the cold queue: look again
			// soon, as the poller does, rather than after an Interval.
			backoff = r.cfg.Interval
			next = roomWait
		case err != nil:
			r.log.ErrorContext(ctx, "outbox position reader: read failed; retrying with backoff", outboxlog.Err(err))
			backoff = min(2*backoff, 5*time.Second)
			next = backoff
		case full:
			backoff = r.cfg.Interval
			next = 0
		default:
			backoff = r.cfg.Interval
		}
		timer.Reset(next)
	}
}

// watch keeps src watching until ctx is done, so that a commit the hot
// path does not deliver (another instance's, a WriterOnly process's) is read
// at once rather than at the next Interval.
func (r *Reader) watch(ctx context.Context, src core.WakeSource) {
	watch.Run(ctx, src, r.cfg.DB, r.Wake, r.log, watch.Logs{
		Unable: "outbox position reader cannot watch for new events; it reads every interval only",
		Lost:   "outbox position reader lost its watch connection; reading every interval meanwhile",
	})
}

// cycle is one round: take over or stand by, read after the cursor, read
// the gaps again and drop the final ones, hand over what was read (in
// position order), move the events of diverted keys to the claim path,
// save. It reports whether the read after the cursor came back full.
//
// The read after the cursor comes before the gaps are read again, so that
// an event of an ordered key is never handed over before an earlier one of
// its key: if e1 committed before e2's INSERT and a read returns e2, e1 is
// returned by the same read (a smaller position, committed before it), or
// it lies in a gap that the re-read after it finds, or it was seen before.
func (r *Reader) cycle(ctx context.Context) (full bool, err error) {
	db, lg := r.cfg.DB, r.cfg.Log
	if !r.active() {
		r.standBy()
		return false, nil
	}
	if !r.live() {
		st, err := lg.ClaimState(ctx, db, r.owner, r.cfg.Now())
		if err != nil {
			return false, err
		}
		var open []Key
		if len(r.cfg.Ordering) > 0 {
			if open, err = lg.OpenKeys(ctx, db); err != nil {
				return false, err
			}
		}
		_, tok, err := lg.Horizon(ctx, db)
		if err != nil {
			return false, err
		}
		r.keys.reset(open)
		r.t.load(st, tok)
		r.saveMu.Lock()
		r.saved = st
		r.saveMu.Unlock()
		r.log.InfoContext(ctx, "outbox position reader: reading from the persisted position",
			slog.Int64("floor", st.Floor), slog.Int64("cursor", st.Cursor), slog.Int("open_ranges", len(st.Open)),
			slog.Int("open_keys", len(open)))
		// The hot path takes positions from now on: what FirstCycle waits
		// for, not this cycle's read of a backlog.
		r.markCycled()
	}
	room := r.cfg.Handler.ColdCapacity()
	r.waitsForRoom = false
	gaps := r.t.startCycle()
	_, cursor, _ := r.t.lag()
	var h Token
	if len(gaps) > 0 {
		if h, _, err = lg.Horizon(ctx, db); err != nil {
			return false, err
		}
	}
	var got []Row // rows to hand over, from both reads
	if room <= 0 {
		r.waitsForRoom = true // reading on would only hand rows back
	}
	if room > 0 && !r.keys.full(r.cfg.OrderedMax) {
		n := min(room, r.cfg.BatchSize)
		// While the hot path delivers, most rows need no delivery here:
		// read their positions alone, then the few rows to deliver.
		light := r.t.hotAhead()
		read := lg.ReadAfter
		if light {
			read = lg.ReadKeysAfter
		}
		rows, tok, err := read(ctx, db, cursor, n)
		if err != nil {
			return false, err
		}
		var fetch []Range
		kept := rows[:0] // the rows to deliver, filtered in place
		for _, row := range rows {
			if r.t.seenAfter(row.Pos, row.ID, tok) != deliver {
				continue
			}
			if !light {
				kept = append(kept, row)
				continue
			}
			if k := len(fetch); k > 0 && fetch[k-1].Hi+1 == row.Pos {
				fetch[k-1].Hi = row.Pos
			} else {
				fetch = append(fetch, Range{Lo: row.Pos, Hi: row.Pos})
			}
		}
		if !light {
			got = kept
		}
		full = len(rows) == n
		r.waitsForRoom = full && n < r.cfg.BatchSize // the read was cut to the room left
		if len(fetch) > 0 {
			// In flight already (seen), so nothing else hands them over;
			// a row that left STREAM meanwhile cannot: only this process
			// writes the rows it holds.
			fetched, err := lg.ReadRanges(ctx, db, fetch)
			got = slices.Grow(got, len(fetched))
			found := make(map[int64]bool, len(fetched))
			for _, row := range fetched {
				found[row.Pos] = true
				got = append(got, row)
			}
			for _, rg := range fetch {
				for p := rg.Lo; p <= rg.Hi; p++ {
					if !found[p] {
						r.t.giveBackPos(p) // read again, as a gap
					}
				}
			}
			if err != nil {
				r.route(ctx, got)
				return false, err
			}
		}
	}
	if len(gaps) > 0 {
		rows, err := lg.ReadRanges(ctx, db, gaps)
		if err != nil {
			r.route(ctx, got)
			return false, err
		}
		for _, row := range rows {
			if r.t.seenInGap(row.Pos, row.ID) == deliver {
				got = append(got, row)
			}
		}
		r.t.finalize(h, cursor)
	}
	r.route(ctx, got)
	if err := r.divertPending(ctx); err != nil {
		return false, err
	}
	if now := r.cfg.Now(); now.Sub(r.savedAt) >= r.cfg.SaveEvery {
		r.savedAt = now
		return full, r.save(ctx)
	}
	return full, nil
}

// standBy drops the state: another process is the table's reader.
func (r *Reader) standBy() {
	r.t.setLive(false)
	r.keys.reset(nil)
}

// ordered reports whether row is an event of an ordered aggregate type,
// delivered one at a time per key.
func (r *Reader) ordered(row Row) bool {
	if row.Err != nil || len(r.cfg.Ordering) == 0 || row.Event.AggregateID() == "" {
		return false
	}
	_, ok := r.cfg.Ordering.Ordered(row.Event.AggregateType())
	return ok
}

// route hands rows over in position order: the unordered ones, and each
// ordered one that is its key's head; the others wait in their key's queue.
func (r *Reader) route(ctx context.Context, rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int { return cmpInt(a.Pos, b.Pos) })
	for _, row := range rows {
		if !r.ordered(row) || r.keys.add(row) {
			r.hand(ctx, row)
		}
	}
}

// next hands over the event after id in id's key, when id was an ordered
// head that resolved. It runs on the dispatcher's goroutines.
func (r *Reader) next(ctx context.Context, id string) {
	if len(r.cfg.Ordering) == 0 {
		return
	}
	if row, ok := r.keys.finish(id); ok && !r.hand(ctx, row) {
		r.Wake() // given back: read again
	}
}

// divertPending moves the events read for diverted keys to the claim path
// behind their keys' unfinished events, or, for a key whose events there
// all finished, takes the key back.
func (r *Reader) divertPending(ctx context.Context) error {
	var first error
	for key, rows := range r.keys.takePending() {
		ids := make([]string, len(rows))
		for i, row := range rows {
			ids[i] = row.ID
			// Once moved, a row's outcome is the claim path's, even
			// before resolve below (a poller may deliver it at once).
			r.t.beginFail(row.ID)
		}
		moved, err := r.cfg.Log.Divert(ctx, r.cfg.DB, key, ids, nil)
		switch {
		case err != nil:
			r.t.endFail(ids)
			r.keys.repend(key, rows)
			first = cmp.Or(first, err)
		case moved:
			for _, id := range ids {
				r.t.resolve(id)
			}
		default:
			r.t.endFail(ids)
			r.keys.undivert(key)
			r.route(ctx, rows)
		}
	}
	return first
}

// hand gives a row to the dispatcher, or marks it DEAD when it cannot be
// decoded; a refused one is read again (false).
func (r *Reader) hand(ctx context.Context, row Row) bool {
	if row.Err != nil {
		r.log.ErrorContext(ctx, "outbox position reader: row cannot be decoded; marked DEAD", outboxlog.Err(row.Err), slog.String("event_id", row.ID))
		// A key's next row is handed over from the DONE before it, in the
		// worker that delivered that one: the write gets a cycle's time of
		// its own rather than the worker's context.
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.CycleTimeout)
		defer cancel()
		if _, err := r.cfg.Log.MarkFailed(mctx, r.cfg.DB, row.ID, true, r.cfg.Now(), row.Err.Error()); err != nil {
			r.log.ErrorContext(ctx, "outbox position reader: marking an undecodable row DEAD failed", outboxlog.Err(err), slog.String("event_id", row.ID))
			r.t.giveBack(row.ID)
			return false
		}
		r.t.resolve(row.ID)
		return true
	}
	ev := row.Event
	ev.LockedBy, ev.LockedAt = r.owner, r.cfg.Now()
	if !r.cfg.Handler.EnqueueCold(ev) {
		r.t.giveBack(row.ID)
		return false
	}
	return true
}

// save writes the state when it changed. Fenced by the owner: a reader
// that lost the position (another process took it over) stops.
func (r *Reader) save(ctx context.Context) error {
	st := r.t.state()
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	if st.Floor == r.saved.Floor && st.Cursor == r.saved.Cursor && sameRanges(st.Open, r.saved.Open) {
		return nil
	}
	ok, err := r.cfg.Log.SaveState(ctx, r.cfg.DB, r.owner, st, r.cfg.Now())
	if err != nil {
		return err
	}
	if !ok {
		r.standBy()
		return fmt.Errorf("the position was taken over by another reader; standing by")
	}
	r.saved = st
	return nil
}

func sameRanges(a, b []Range) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Lag returns the floor and cursor of this reader and its open gaps; zeros
// when it is not the table's reader.
func (r *Reader) Lag() (floor, cursor int64, gaps int) { return r.t.lag() }

// FirstCycle returns a channel closed once the reader has loaded the
// persisted position (the hot path takes positions from then on, before
// the first read of a backlog), or its first cycle stood by or failed (it
// retries with backoff), or the reader has stopped.
func (r *Reader) FirstCycle() <-chan struct{} { return r.cycledChan() }

func (r *Reader) cycledChan() chan struct{} {
	r.cycledMake.Do(func() { r.cycled = make(chan struct{}) })
	return r.cycled
}

func (r *Reader) markCycled() {
	ch := r.cycledChan()
	r.cycledOnce.Do(func() { close(ch) })
}
