package position

import (
	"slices"
	"sync"
)

// tracker is the reader's state: which positions are resolved. A position
// is resolved when its event was delivered (DONE), written RETRY or DEAD,
// or when it is a final gap (no row will ever commit there). Every position
// at or below floor is resolved; cursor is the largest position read;
// between them, an unresolved position is
//
//   - a gap: not seen by a read, and maybe still to commit (gaps);
//   - in flight: handed to the dispatcher by the reader (flight);
//   - hot: taken by this process's hot path at its INSERT (hot), whether
//     or not a read saw it yet. An INSERT held until its transaction's
//     COMMIT (see package writectx) takes its events hot before it runs,
//     their positions unknown (0 in hot, absent from hotPos): the INSERT's
//     result, or a read that returns the row first, gives the position.
//
// Positions above the cursor that the hot path resolved before a read
// reached them are in ahead, so that the read skips them.
//
// Gaps are added by the reader's goroutine only (a read, or at the start of
// a cycle from redo); the outcomes, arriving on the dispatcher's
// goroutines, only remove positions or add to redo. So the gaps a cycle
// re-reads are exactly those whose finality it decides, minus what was
// resolved meanwhile.
type tracker struct {
	mu     sync.Mutex
	floor  int64
	cursor int64
	gaps   []gap // sorted, disjoint
	redo   []int64
	flight map[string]int64 // event id -> position
	hot    map[string]int64 // event id -> position, 0 until known
	hotPos map[int64]string // the known positions of hot
	ahead  map[int64]struct{}
	// failing: held ids (hot or in flight) whose RETRY or DEAD is being
	// written. Once it lands the row is the claim path's: this process's
	// poller may claim and deliver it before the write returns, and that
	// delivery's outcome is the claim path's to write.
	failing map[string]struct{}
	// hotMax bounds hot: an INSERT that finds it full is left to the
	// reader.
	hotMax int
	// live: the state is loaded and this process is the reader; the hot
	// path takes positions only then.
	live bool
}

// gap is positions lo to hi, none seen by a read, with the token of the
// read that left them (see Log.Horizon).
type gap struct {
	lo, hi int64
	tok    Token
}

func newTracker(hotMax int) *tracker {
	t := &tracker{hotMax: hotMax}
	t.reset()
	return t
}

// reset forgets everything but the hot path's positions: they belong to
// the transactions of this process, whatever the reader does.
func (t *tracker) reset() {
	t.floor, t.cursor, t.gaps, t.redo, t.live = 0, 0, nil, nil, false
	t.flight = map[string]int64{}
	t.ahead = map[int64]struct{}{}
	if t.failing == nil {
		t.failing = map[string]struct{}{}
	}
	if t.hot == nil {
		t.hot = map[string]int64{}
		t.hotPos = map[int64]string{}
	}
}

// load starts from a persisted state; its open positions become gaps with
// token tok (one taken now: every transaction that could hold one of them
// took its id before now).
func (t *tracker) load(st State, tok Token) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reset()
	t.floor, t.cursor = st.Floor, max(st.Cursor, st.Floor)
	for _, r := range st.Open {
		if r.Hi > t.floor && r.Lo <= t.cursor {
			t.gaps = append(t.gaps, gap{lo: max(r.Lo, t.floor+1), hi: min(r.Hi, t.cursor), tok: tok})
		}
	}
	slices.SortFunc(t.gaps, func(a, b gap) int { return cmpInt(a.lo, b.lo) })
	t.live = true
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// takeHot records that the hot path holds id at pos, or at a position not
// known yet when pos is 0 (see hotAt); false when the hot path may not
// take it (not live, or full): the reader delivers it.
func (t *tracker) takeHot(id string, pos int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.live || len(t.hot) >= t.hotMax {
		return false
	}
	t.hot[id] = pos
	if pos != 0 {
		t.hotPos[pos] = id
	}
	return true
}

// hotAt gives the hot id, taken with its position unknown, its position;
// nothing when a read gave it first or the id is not hot any more. Under
// mu.
func (t *tracker) hotAt(id string, pos int64) {
	if p, ok := t.hot[id]; ok && p == 0 {
		t.hot[id] = pos
		t.hotPos[pos] = id
	}
}

// setHotPos is hotAt, for the INSERT's result.
func (t *tracker) setHotPos(id string, pos int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.hotAt(id, pos)
}

// isHot reports whether the hot path holds id.
func (t *tracker) isHot(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.hot[id]
	return ok
}

// dropHot forgets id's hot position without resolving it: its delivery
// was given back, or its transaction reported a rollback. Either way the
// reader reads the position again when a read already passed it other than
// as a gap: such a read returned the row, so it is committed. A rollback
// report does not prove the opposite: a COMMIT whose answer was lost (the
// connection broke as the server committed) runs the after-rollback hooks
// too. A position still in a gap, or not reached yet, needs nothing: the
// gap stays open until the writing transaction has ended.
func (t *tracker) dropHot(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pos, ok := t.hot[id]
	if !ok {
		return
	}
	delete(t.hot, id)
	if pos == 0 {
		return // no read has returned its row: the reader delivers it when one does
	}
	delete(t.hotPos, pos)
	if pos <= t.cursor && !t.inGap(pos) {
		t.redo = append(t.redo, pos)
	}
}

// owns reports whether id is an event of position delivery this process
// holds (hot or in flight) and is not failing: its outcome and lease are
// the position's.
func (t *tracker) owns(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ownsLocked(id)
}

// ownsLocked is owns under mu.
func (t *tracker) ownsLocked(id string) bool {
	if _, ok := t.failing[id]; ok {
		return false
	}
	return t.holds(id)
}

// holds reports whether id is hot or in flight. Under mu.
func (t *tracker) holds(id string) bool {
	if _, ok := t.hot[id]; ok {
		return true
	}
	_, ok := t.flight[id]
	return ok
}

// isFailing reports whether id's RETRY or DEAD is being written by the
// position (beginFail, not yet resolved).
func (t *tracker) isFailing(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.failing[id]
	return ok
}

// beginFail marks a held id failing, and reports whether it is held
// (failing already or not): its RETRY or DEAD is the position's to write.
func (t *tracker) beginFail(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.holds(id) {
		return false
	}
	t.failing[id] = struct{}{}
	return true
}

// endFail takes ids out of failing: their rows stayed STREAM.
func (t *tracker) endFail(ids []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range ids {
		delete(t.failing, id)
	}
}

// resolve records the outcome of id (delivered, RETRY or DEAD written).
func (t *tracker) resolve(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resolveLocked(id)
}

// resolveOwned resolves id as delivered when the tracker owns it (see
// owns), under one lock, and reports whether it did.
func (t *tracker) resolveOwned(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.ownsLocked(id) {
		return false
	}
	t.resolveLocked(id)
	return true
}

// resolveLocked is resolve under mu.
func (t *tracker) resolveLocked(id string) {
	delete(t.failing, id)
	if pos, ok := t.hot[id]; ok {
		delete(t.hot, id)
		if pos == 0 {
			// Delivered before its position was known, which the INSERT's
			// result gives before the COMMIT's: not expected. A read
			// delivers it again.
			return
		}
		delete(t.hotPos, pos)
		if !t.live {
			return
		}
		if pos > t.cursor {
			t.ahead[pos] = struct{}{}
			return
		}
		t.removeGap(pos) // committed after a read passed it
		return
	}
	delete(t.flight, id)
}

// giveBack records that the dispatcher gave id back undelivered (a refused
// or interrupted delivery): the reader reads it again.
func (t *tracker) giveBack(id string) {
	t.mu.Lock()
	if pos, ok := t.flight[id]; ok {
		delete(t.flight, id)
		t.redo = append(t.redo, pos)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	t.dropHot(id)
}

// inGap reports whether pos lies in a gap. Under mu.
func (t *tracker) inGap(pos int64) bool {
	_, ok := t.gapAt(pos)
	return ok
}

// gapAt returns the index of the gap holding pos. Under mu.
func (t *tracker) gapAt(pos int64) (int, bool) {
	i, found := slices.BinarySearchFunc(t.gaps, pos, func(g gap, p int64) int {
		switch {
		case g.hi < p:
			return -1
		case g.lo > p:
			return 1
		}
		return 0
	})
	return i, found
}

// removeGap takes pos out of the gaps. Under mu.
func (t *tracker) removeGap(pos int64) bool {
	i, ok := t.gapAt(pos)
	if !ok {
		return false
	}
	g := t.gaps[i]
	switch {
	case g.lo == g.hi:
		t.gaps = slices.Delete(t.gaps, i, i+1)
	case pos == g.lo:
		t.gaps[i].lo++
	case pos == g.hi:
		t.gaps[i].hi--
	default:
		t.gaps = slices.Insert(t.gaps, i+1, gap{lo: pos + 1, hi: g.hi, tok: g.tok})
		t.gaps[i].hi = pos - 1
	}
	return true
}

// action is what the reader does with a row it read.
type action int

const (
	skip    action = iota // resolved or held already
	deliver               // hand it to the dispatcher
)

// seenAfter records a row that a read after the cursor returned with token
// tok (rows in ascending position), and returns what to do with it. The
// cursor moves past the row at once, the positions between the old cursor
// and it that the read did not return becoming gaps: a hot event given back
// or a rollback reported from now on finds the position passed, and has it
// read again (dropHot).
func (t *tracker) seenAfter(pos int64, id string, tok Token) action {
	t.mu.Lock()
	defer t.mu.Unlock()
	if pos <= t.cursor {
		return skip
	}
	if pos > t.cursor+1 {
		t.addGap(t.cursor+1, pos-1, tok)
	}
	t.cursor = pos
	if _, ok := t.ahead[pos]; ok {
		delete(t.ahead, pos)
		return skip
	}
	return t.take(pos, id)
}

// seenInGap records a row that the re-read of the gaps returned, and
// returns what to do with it.
func (t *tracker) seenInGap(pos int64, id string) action {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.removeGap(pos) {
		return skip // resolved meanwhile (the hot path delivered it)
	}
	return t.take(pos, id)
}

// take puts a row read at pos in flight, unless the hot path or a delivery
// holds it. Under mu.
func (t *tracker) take(pos int64, id string) action {
	if _, ok := t.hotPos[pos]; ok {
		return skip // the hot path delivers it
	}
	if _, ok := t.hot[id]; ok {
		t.hotAt(id, pos) // the read learnt its position first
		return skip
	}
	if _, ok := t.flight[id]; ok {
		return skip
	}
	t.flight[id] = pos
	return deliver
}

// addGap adds positions lo to hi, minus those the hot path resolved ahead
// of the read, as gaps. Under mu.
func (t *tracker) addGap(lo, hi int64, tok Token) {
	start := lo
	for p := lo; p <= hi && len(t.ahead) > 0; p++ {
		if _, ok := t.ahead[p]; ok {
			delete(t.ahead, p)
			if p > start {
				t.gaps = append(t.gaps, gap{lo: start, hi: p - 1, tok: tok})
			}
			start = p + 1
		}
	}
	if start <= hi {
		t.gaps = append(t.gaps, gap{lo: start, hi: hi, tok: tok})
	}
}

// startCycle moves the redo positions into the gaps, with token 0 (their
// rows are committed: a read finds them), and returns the gaps to read
// again.
func (t *tracker) startCycle() []Range {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.redo {
		if p > t.floor && p <= t.cursor && !t.inGap(p) {
			i, _ := t.gapAt(p)
			t.gaps = slices.Insert(t.gaps, i, gap{lo: p, hi: p})
		}
	}
	t.redo = t.redo[:0]
	rs := make([]Range, len(t.gaps))
	for i, g := range t.gaps {
		rs[i] = Range{Lo: g.lo, Hi: g.hi}
	}
	return rs
}

// finalize drops the gaps at or below upTo (the cursor when the cycle
// began: the gaps the re-read covered) whose token the horizon h (taken
// before the re-read of this cycle) has reached: what the re-read did not
// find there never commits.
func (t *tracker) finalize(h Token, upTo int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gaps = slices.DeleteFunc(t.gaps, func(g gap) bool { return g.tok <= h && g.hi <= upTo })
}

// hasGaps reports whether gaps wait to be read again.
func (t *tracker) hasGaps() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.gaps) > 0 || len(t.redo) > 0
}

// state returns the state to persist: the floor moved up to the first
// unresolved position, and the open positions as ranges.
func (t *tracker) state() State {
	t.mu.Lock()
	defer t.mu.Unlock()
	var open []int64
	for _, p := range t.flight {
		open = append(open, p)
	}
	for p := range t.hotPos {
		if p <= t.cursor {
			open = append(open, p)
		}
	}
	for _, p := range t.redo {
		if p <= t.cursor {
			open = append(open, p)
		}
	}
	slices.Sort(open)
	var rs []Range
	gi, oi := 0, 0
	add := func(lo, hi int64) {
		if n := len(rs); n > 0 && rs[n-1].Hi+1 >= lo {
			rs[n-1].Hi = max(rs[n-1].Hi, hi)
			return
		}
		rs = append(rs, Range{Lo: lo, Hi: hi})
	}
	for gi < len(t.gaps) || oi < len(open) {
		if oi == len(open) || gi < len(t.gaps) && t.gaps[gi].lo <= open[oi] {
			add(t.gaps[gi].lo, t.gaps[gi].hi)
			gi++
			continue
		}
		add(open[oi], open[oi])
		oi++
	}
	t.floor = t.cursor
	if len(rs) > 0 {
		t.floor = rs[0].Lo - 1
	}
	return State{Floor: t.floor, Cursor: t.cursor, Open: rs}
}

// lag returns the positions read but not resolved past the floor, and how
// many gaps are open.
func (t *tracker) lag() (floor, cursor int64, gaps int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.floor, t.cursor, len(t.gaps)
}

// setLive sets whether this process is the reader; off, the state is
// dropped (another reader owns the position).
func (t *tracker) setLive(live bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !live {
		t.reset()
	}
	t.live = live
}

// hotAhead reports whether the hot path holds positions above the cursor:
// the next read will mostly find rows it need not deliver.
func (t *tracker) hotAhead() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.hot) > 0 || len(t.ahead) > 0
}

// giveBackPos is giveBack by position, for a row handed over whose read
// failed.
func (t *tracker) giveBackPos(pos int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, p := range t.flight {
		if p == pos {
			delete(t.flight, id)
			t.redo = append(t.redo, pos)
			return
		}
	}
}

// passAhead moves the cursor over the leading rows of a read after it
// (positions ascending) that the hot path resolved ahead of the reader, and
// reports whether it passed them all. It hands nothing over: at shutdown,
// so that the saved cursor covers what the hot path delivered.
func (t *tracker) passAhead(got []int64, tok Token) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range got {
		if _, ok := t.ahead[p]; !ok || p <= t.cursor {
			return false
		}
		delete(t.ahead, p)
		if p > t.cursor+1 {
			t.addGap(t.cursor+1, p-1, tok)
		}
		t.cursor = p
	}
	return true
}

// aheadCount returns how many positions the hot path resolved ahead of the
// cursor.
func (t *tracker) aheadCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.ahead)
}
