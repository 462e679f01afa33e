package dispatch

import (
	"context"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/lease"
)

// doneBatcher writes DONE outcomes in batches through a core.BatchMarker,
// or deletes delivered events through a core.DoneDeleter
// (Config.DeleteDelivered). Workers hand it delivered events (add); one
// goroutine (run) collects them for up to Config.DoneBatchLinger or
// Config.DoneBatchSize events, writes them with one statement per lease
// owner, and only then drops them from
// the in-flight tracker, so that an event whose DONE is not yet written is
// never accepted again. A failed write is tried again (see run).
//
// The channel is bounded (2*DoneBatchSize, at least 1024 ids, no payloads):
// when the database falls behind, workers block in add, stop taking events,
// and the queues fill up and refuse further ones, which then wait in the
// table. Memory stays bounded.
type doneBatcher struct {
	d      *Dispatcher
	what   string // "DONE", or "delete" with Config.DeleteDelivered, for logs
	record recordFunc
	size   int
	linger time.Duration
	in     chan doneItem // closed at shutdown once every worker has exited
	done   chan struct{} // closed when run has written everything and exited
}

// doneItem is a delivered event waiting for its DONE write: only what the
// write needs, so that a pending batch holds no payload.
type doneItem = lease.Lease

// recordFunc records the delivery of ids leased by owner in one call:
// core.BatchMarker.MarkDoneBatch or core.DoneDeleter.DeleteDoneBatch.
type recordFunc func(ctx context.Context, owner string, ids []string, now time.Time) (int64, error)

func newDoneBatcher(d *Dispatcher, what string, record recordFunc) *doneBatcher {
	size := d.cfg.DoneBatchSize
	return &doneBatcher{
		d: d, what: what, record: record, size: size, linger: d.cfg.DoneBatchLinger,
		// Room for the next batches while one is being written, so that a
		// slow write does not stall the workers at once.
		in:   make(chan doneItem, max(2*size, 1024)),
		done: make(chan struct{}),
	}
}

// add hands over a delivered event; it blocks while the batcher is full.
func (b *doneBatcher) add(ev core.Event) { b.in <- doneItem{ID: ev.ID(), Owner: ev.LockedBy} }

// A DONE write that fails (the database was unreachable for a moment) is
// tried again, with backoff from doneRetryMin to doneRetryMax, between new
// batches; its events stay in flight meanwhile, so that this dispatcher's
// own poller, should their leases expire, holds them instead of delivering
// them again. Shutdown makes one last attempt, then lets them go: their rows
// stay leased until the lease expires, and the event is delivered again.
const (
	doneRetryMin = 100 * time.Millisecond
	doneRetryMax = 10 * time.Second
	// maxUnwritten bounds the DONE outcomes kept for another try; beyond
	// it, events are let go at once.
	maxUnwritten = 100_000
)

// run collects and writes batches until in is closed and drained. ctx carries
// the values of Start's context; its cancellation is ignored, since outcomes
// must be written even while shutting down.
func (b *doneBatcher) run(ctx context.Context) {
	defer close(b.done)
	ctx = context.WithoutCancel(ctx)
	var (
		batch   = make([]doneItem, 0, b.size)
		failed  []doneItem // writes to try again
		backoff = doneRetryMin
	)
	linger := time.NewTimer(b.linger)
	linger.Stop()
	retry := time.NewTimer(backoff)
	retry.Stop()
	for {
		var (
			it doneItem
			ok bool
		)
		select {
		case it, ok = <-b.in:
		case <-retry.C:
			if failed = b.write(ctx, failed); len(failed) > 0 {
				backoff = min(2*backoff, doneRetryMax)
				retry.Reset(backoff)
			} else {
				backoff = doneRetryMin
			}
			continue
		}
		if !ok {
			b.lastTry(ctx, failed)
			return
		}
		batch = append(batch[:0], it)
		closed := false
		linger.Reset(b.linger)
	collect:
		for len(batch) < b.size {
			select {
			case it, ok := <-b.in:
				if !ok {
					closed = true
					break collect
				}
				batch = append(batch, it)
			case <-linger.C:
				break collect
			}
		}
		linger.Stop()
		if f := b.write(ctx, batch); len(f) > 0 {
			if len(failed) == 0 {
				retry.Reset(backoff)
			}
			failed = b.keep(failed, f)
		}
		if closed {
			b.lastTry(ctx, failed)
			return
		}
	}
}

// write records items as DONE, one statement per lease owner, untracks the
// events of each statement that succeeds and returns the items of those
// that failed. A failed write is an infrastructure failure, not a listener
// failure: it is logged and counted once per failed statement
// (Metrics.StoreError).
func (b *doneBatcher) write(ctx context.Context, items []doneItem) (failed []doneItem) {
	d := b.d
	wctx, cancel := context.WithTimeout(ctx, d.cfg.StoreTimeout)
	defer cancel()
	now := d.cfg.Now()
	for _, g := range lease.ByOwner(items, nil) {
		n, err := b.record(wctx, g.Owner, g.IDs, now)
		switch {
		case err != nil:
			d.cfg.Metrics.StoreError()
			d.log.Error().Err(err).Int("events", len(g.IDs)).Str("first_event_id", g.IDs[0]).Str("write", b.what).
				Msg("outbox write-back of delivered events failed; trying again")
			for _, id := range g.IDs {
				failed = append(failed, doneItem{ID: id, Owner: g.Owner})
			}
			continue
		case n < int64(len(g.IDs)):
			d.log.Warn().Int("events", len(g.IDs)).Int64("written", n).Str("first_event_id", g.IDs[0]).Str("write", b.what).
				Msg("outbox write-back fenced for part of a batch of delivered events: leases lost to another owner or rows terminal")
		}
		d.inflight.untrackAll(g.IDs)
	}
	return failed
}

// keep adds f to the writes to try again, up to maxUnwritten; the events of
// the rest are let go.
func (b *doneBatcher) keep(failed, f []doneItem) []doneItem {
	n := min(len(f), max(maxUnwritten-len(failed), 0))
	b.letGo(f[n:], "outbox dispatcher keeps too many unwritten DONE outcomes")
	return append(failed, f[:n]...)
}

// lastTry makes the last attempt at shutdown and lets go of what still fails.
func (b *doneBatcher) lastTry(ctx context.Context, failed []doneItem) {
	if len(failed) > 0 {
		b.letGo(b.write(ctx, failed), "outbox DONE outcomes not written at shutdown")
	}
}

// letGo untracks the events of items, whose DONE is not written: they are
// delivered again once their leases expire.
func (b *doneBatcher) letGo(items []doneItem, why string) {
	if len(items) == 0 {
		return
	}
	b.d.log.Warn().Int("events", len(items)).Msg(why + "; these events will be delivered again once their leases expire")
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ID
	}
	b.d.inflight.untrackAll(ids)
}
