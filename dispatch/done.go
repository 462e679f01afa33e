package dispatch

import (
	"context"
	"time"

	"github.com/outboxkit/outbox/core"
)

// doneBatcher writes DONE outcomes in batches through a core.BatchMarker.
// Workers hand it delivered events (add); one goroutine (run) collects them
// for up to Config.DoneBatchLinger or Config.DoneBatchSize events, writes
// them with one MarkDoneBatch per lease owner, and only then drops them from
// the in-flight tracker, so that an event whose DONE is not yet written is
// never accepted again.
//
// The channel is bounded (2*DoneBatchSize, at least 1024 ids, no payloads):
// when the database falls behind, workers block in add, stop taking events,
// and the queues fill up and refuse further ones, which then wait in the
// table. Memory stays bounded.
type doneBatcher struct {
	d      *Dispatcher
	bm     core.BatchMarker
	size   int
	linger time.Duration
	in     chan doneItem // closed by the supervisor once every worker has exited
	done   chan struct{} // closed when run has written everything and exited
}

// doneItem is a delivered event waiting for its DONE write: only what the
// write needs, so that a pending batch holds no payload.
type doneItem struct{ id, owner string }

func newDoneBatcher(d *Dispatcher, bm core.BatchMarker) *doneBatcher {
	size := d.cfg.DoneBatchSize
	return &doneBatcher{
		d: d, bm: bm, size: size, linger: d.cfg.DoneBatchLinger,
		// Room for the next batches while one is being written, so that a
		// slow write does not stall the workers at once.
		in:   make(chan doneItem, max(2*size, 1024)),
		done: make(chan struct{}),
	}
}

// add hands over a delivered event; it blocks while the batcher is full.
func (b *doneBatcher) add(ev core.Event) { b.in <- doneItem{id: ev.ID(), owner: ev.LockedBy} }

// run collects and writes batches until in is closed and drained. ctx carries
// the values of Start's context; its cancellation is ignored, since outcomes
// must be written even while shutting down.
func (b *doneBatcher) run(ctx context.Context) {
	defer close(b.done)
	ctx = context.WithoutCancel(ctx)
	batch := make([]doneItem, 0, b.size)
	linger := time.NewTimer(b.linger)
	linger.Stop()
	for {
		it, ok := <-b.in
		if !ok {
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
		b.write(ctx, batch)
		if closed {
			return
		}
	}
}

// write records batch as DONE, one statement per lease owner, then untracks
// its events. A failed write is an infrastructure failure, not a listener
// failure: it is logged and counted once per failed statement
// (Metrics.StoreError), and the rows stay leased until their lease expires.
func (b *doneBatcher) write(ctx context.Context, batch []doneItem) {
	d := b.d
	wctx, cancel := context.WithTimeout(ctx, d.cfg.StoreTimeout)
	defer cancel()
	now := d.cfg.Now()
	for _, g := range groupByOwner(batch) {
		n, err := b.bm.MarkDoneBatch(wctx, d.cfg.DB, g.owner, g.ids, now)
		switch {
		case err != nil:
			d.cfg.Metrics.StoreError()
			d.log.Error().Err(err).Int("events", len(g.ids)).Str("first_event_id", g.ids[0]).
				Msg("outbox write-back of a DONE batch failed; the rows stay leased until the lease expires")
		case n < int64(len(g.ids)):
			d.log.Warn().Int("events", len(g.ids)).Int64("written", n).Str("first_event_id", g.ids[0]).
				Msg("outbox write-back fenced for part of a DONE batch: leases lost to another owner or rows terminal")
		}
	}
	d.mu.Lock()
	for _, it := range batch {
		delete(d.tracked, it.id)
	}
	d.mu.Unlock()
}

// ownerIDs is the ids of a batch leased by one owner.
type ownerIDs struct {
	owner string
	ids   []string
}

// groupByOwner splits batch by lease owner, in order of first appearance.
// Almost always there is one owner: this dispatcher's, which its poller
// shares.
func groupByOwner(batch []doneItem) []ownerIDs {
	var groups []ownerIDs
	for _, it := range batch {
		i := 0
		for i < len(groups) && groups[i].owner != it.owner {
			i++
		}
		if i == len(groups) {
			groups = append(groups, ownerIDs{owner: it.owner, ids: make([]string, 0, len(batch))})
		}
		groups[i].ids = append(groups[i].ids, it.id)
	}
	return groups
}
