package dispatch

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxkit/outbox/outboxlog"
)

// Write-backs: the one path every outcome takes to the store.
//
// An outcome (DONE, RETRY, DEAD) is a writeOp on the tracker entry of its
// event. Its first attempt is made by the worker (or, for DONE outcomes
// written in batches, by the batcher). A write that fails (the database was
// unreachable for a moment) is kept in pendingWrites and tried again by one
// goroutine (retryWrites) with backoff from writeRetryMin to writeRetryMax,
// for as long as the event stays held: its entry stays in the tracker, so
// its lease keeps being renewed and this dispatcher's own poller, should it
// claim the row, finds it held. A write whose entry is no longer current
// (its lease was lost, or a newer claim replaced a reopening entry) is
// dropped without being tried: the row is no longer this delivery's to
// write. So a failed write-back never causes another delivery by itself.
//
// Shutdown makes one last attempt once the workers and the batcher are
// done; what still fails is let go: its row stays leased by this
// dispatcher until the lease expires (Config.LeaseTimeout), and then the
// event is delivered again by whichever instance claims it.
const (
	writeRetryMin = 100 * time.Millisecond
	writeRetryMax = 10 * time.Second
	// maxUnwritten bounds the outcomes kept for another try; beyond it,
	// events are let go at once.
	maxUnwritten = 100_000
)

// writeKind is the outcome a writeOp records.
type writeKind int

const (
	writeDone writeKind = iota
	writeRetry
	writeDead
)

func (k writeKind) String() string {
	switch k {
	case writeDone:
		return "done"
	case writeRetry:
		return "retry"
	default:
		return "dead"
	}
}

// writeOp is one outcome to write: only what the write needs, so that a
// pending write holds no payload.
type writeOp struct {
	e       *entry
	kind    writeKind
	at      time.Time // RETRY: when the next attempt is due; DEAD: done_at
	created time.Time // RETRY: the event's created_at
	lastErr string    // RETRY, DEAD
}

// maxWorkerWrites bounds the write-backs workers make at once, each on a
// connection of the pool: with hundreds of workers (an asynchronous
// listener's InFlight, see Config.Workers) a burst of failures, a broker
// going down, would otherwise open as many connections as there are
// workers, beyond what the database accepts, and starve the application's
// own queries. DONE outcomes in batches are written by one goroutine and
// take no slot.
const maxWorkerWrites = 32

// write makes the first attempt at op and keeps it for the retry goroutine
// if it fails. It waits for one of maxWorkerWrites slots.
func (d *Dispatcher) write(ctx context.Context, op writeOp) {
	d.writeSlots <- struct{}{}
	failed := d.apply(ctx, []writeOp{op})
	<-d.writeSlots
	if len(failed) > 0 {
		d.pending.keep(d, failed)
	}
}

// apply writes ops, each bounded by one StoreTimeout for the call, on a
// context shutdown does not cancel, and returns those that failed. DONE
// outcomes go in batches per owner when the dispatcher batches them
// (d.doneBatch), the others one by one. Ops whose entry is no longer current
// are dropped. A failed write is an infrastructure failure, not a listener
// failure: it is logged and counted (Metrics.StoreError), and no attempt is
// charged.
func (d *Dispatcher) apply(ctx context.Context, ops []writeOp) (failed []writeOp) {
	if len(ops) == 0 {
		return nil
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.StoreTimeout)
	defer cancel()
	if d.latency != nil {
		defer func(start time.Time) { d.latency.WriteBackDuration(time.Since(start)) }(time.Now())
	}
	now := d.cfg.Now()
	// Ops whose entry is no longer current (lease lost or replaced) have
	// nothing of their delivery to write. One lock for the batch; ops is
	// the caller's and not used again, so it is filtered in place.
	ops = d.inflight.currentOf(ops)
	// The DONE outcomes of one owner, the common case of a batch, go
	// straight to one statement, without grouping.
	if d.doneBatch != nil && d.ordered == nil && allDone(ops) {
		return d.writeDoneBatch(wctx, ops[0].e.owner, ops, now)
	}
	var byOwner map[string][]writeOp
	var owners []string
	ordered := map[string][]writeOp{}
	var orderedOwners []string
	for _, op := range ops {
		if op.e.seq != 0 && d.ordered != nil && op.kind != writeRetry {
			if op.kind == writeDead {
				if !d.writeDeadOrdered(wctx, op) {
					failed = append(failed, op)
				}
				continue
			}
			if _, ok := ordered[op.e.owner]; !ok {
				orderedOwners = append(orderedOwners, op.e.owner)
			}
			ordered[op.e.owner] = append(ordered[op.e.owner], op)
			continue
		}
		if op.kind == writeDone && d.doneBatch != nil {
			if byOwner == nil {
				byOwner = map[string][]writeOp{}
			}
			if _, ok := byOwner[op.e.owner]; !ok {
				owners = append(owners, op.e.owner)
			}
			byOwner[op.e.owner] = append(byOwner[op.e.owner], op)
			continue
		}
		ok, err := d.writeOne(wctx, op, now)
		if err != nil {
			d.cfg.Metrics.StoreError()
			d.log.LogAttrs(ctx, slog.LevelError, "outbox write-back failed; trying again while the event stays leased",
				outboxlog.Err(err), slog.String("event_id", op.e.id), slog.String("write", op.kind.String()))
			failed = append(failed, op)
			continue
		}
		d.landed(ctx, op, ok)
	}
	for _, owner := range owners {
		failed = append(failed, d.writeDoneBatch(wctx, owner, byOwner[owner], now)...)
	}
	for _, owner := range orderedOwners {
		failed = append(failed, d.writeDoneOrdered(wctx, owner, ordered[owner], now, false)...)
	}
	return failed
}

// allDone reports whether ops are unordered DONE outcomes of one owner, at
// least one.
func allDone(ops []writeOp) bool {
	if len(ops) == 0 {
		return false
	}
	owner := ops[0].e.owner
	for _, op := range ops {
		if op.kind != writeDone || op.e.seq != 0 || op.e.owner != owner {
			return false
		}
	}
	return true
}

// writeDoneBatch writes the DONE outcomes g of owner in one call of
// d.doneBatch, and returns g if it failed.
func (d *Dispatcher) writeDoneBatch(ctx context.Context, owner string, g []writeOp, now time.Time) (failed []writeOp) {
	ids := make([]string, len(g))
	for i, op := range g {
		ids[i] = op.e.id
	}
	n, err := d.doneBatch(ctx, owner, ids, now)
	switch {
	case err != nil:
		d.cfg.Metrics.StoreError()
		d.log.LogAttrs(ctx, slog.LevelError, "outbox write-back of delivered events failed; trying again while the events stay leased",
			outboxlog.Err(err), slog.Int("events", len(ids)), slog.String("first_event_id", ids[0]), slog.String("write", d.batch.what))
		return g
	case n < int64(len(ids)):
		d.log.LogAttrs(ctx, slog.LevelWarn, "outbox write-back fenced for part of a batch of delivered events: leases lost to another owner or rows terminal",
			slog.Int("events", len(ids)), slog.Int64("written", n), slog.String("first_event_id", ids[0]), slog.String("write", d.batch.what))
	}
	d.inflight.doneAll(g)
	return nil
}

// writeOne writes op on its own, fenced by its lease owner.
func (d *Dispatcher) writeOne(ctx context.Context, op writeOp, now time.Time) (bool, error) {
	st, owner, id := d.cfg.Store, op.e.owner, op.e.id
	switch op.kind {
	case writeDone:
		return st.MarkDone(ctx, d.cfg.DB, owner, id, now)
	case writeRetry:
		return st.MarkRetry(ctx, d.cfg.DB, owner, id, op.at, op.lastErr)
	default:
		return st.MarkDead(ctx, d.cfg.DB, owner, id, op.at, op.lastErr)
	}
}

// landed finishes op once its write returned without error: its entry leaves
// the tracker (after the write: see inflight), and a RETRY's due time is
// reported to the poller.
func (d *Dispatcher) landed(ctx context.Context, op writeOp, ok bool) {
	d.inflight.done(op.e)
	if !ok {
		d.log.LogAttrs(ctx, slog.LevelWarn, "outbox write-back fenced: the lease was lost to another owner or the row is terminal",
			slog.String("event_id", op.e.id), slog.String("write", op.kind.String()))
		return
	}
	if op.kind == writeRetry {
		d.notifyDue(op.at, op.created)
	}
}

// pendingWrites holds the write-backs to try again.
type pendingWrites struct {
	mu   sync.Mutex
	ops  []writeOp
	kick chan struct{} // capacity 1: tells retryWrites there is work
}

func newPendingWrites() *pendingWrites { return &pendingWrites{kick: make(chan struct{}, 1)} }

// keep adds ops, up to maxUnwritten in all; the events of the rest are let
// go at once.
func (p *pendingWrites) keep(d *Dispatcher, ops []writeOp) {
	p.mu.Lock()
	n := min(len(ops), max(maxUnwritten-len(p.ops), 0))
	p.ops = append(p.ops, ops[:n]...)
	p.mu.Unlock()
	d.letGo(context.Background(), ops[n:], "outbox dispatcher keeps too many unwritten outcomes")
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// take removes and returns every pending write.
func (p *pendingWrites) take() []writeOp {
	p.mu.Lock()
	defer p.mu.Unlock()
	ops := p.ops
	p.ops = nil
	return ops
}

// retryWrites tries the pending writes again, with backoff, until stop is
// closed. ctx carries the values of Start's context.
func (d *Dispatcher) retryWrites(ctx context.Context, stop <-chan struct{}) {
	backoff := writeRetryMin
	timer := time.NewTimer(backoff)
	timer.Stop()
	armed := false
	for {
		select {
		case <-stop:
			timer.Stop()
			return
		case <-d.pending.kick:
			if !armed {
				timer.Reset(backoff)
				armed = true
			}
		case <-timer.C:
			armed = false
			if failed := d.apply(ctx, d.pending.take()); len(failed) > 0 {
				p := d.pending
				p.mu.Lock()
				p.ops = append(failed, p.ops...)
				p.mu.Unlock()
				backoff = min(2*backoff, writeRetryMax)
				timer.Reset(backoff)
				armed = true
			} else {
				backoff = writeRetryMin
			}
		}
	}
}

// lastWrites, at shutdown once no worker or batcher writes any more, makes
// the last attempt at the pending writes and lets go of what still fails.
func (d *Dispatcher) lastWrites(ctx context.Context) {
	d.letGo(ctx, d.apply(ctx, d.pending.take()), "outbox outcomes not written at shutdown")
}

// letGo untracks the events of ops, whose outcome is not written: they are
// delivered again once their leases expire.
func (d *Dispatcher) letGo(ctx context.Context, ops []writeOp, why string) {
	if len(ops) == 0 {
		return
	}
	d.log.LogAttrs(ctx, slog.LevelWarn, why+"; these events will be delivered again once their leases expire",
		slog.Int("events", len(ops)), slog.String("first_event_id", ops[0].e.id))
	for _, op := range ops {
		d.inflight.done(op.e)
	}
}
