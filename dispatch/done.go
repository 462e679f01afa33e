package dispatch

import (
	"context"
	"time"
)

// doneBatcher writes DONE outcomes in batches through a core.BatchMarker,
// or deletes delivered events through a core.DoneDeleter
// (Config.DeleteDelivered). Workers hand it delivered events (add); one
// goroutine (run) collects them for up to Config.DoneBatchLinger or
// Config.DoneBatchSize events and writes them through the dispatcher's one
// write-back path (apply, one statement per lease owner), which drops them
// from the in-flight tracker once written, so that an event whose DONE is
// not yet written is never accepted again. A failed write is kept for the
// write-back retry (see writeback.go).
//
// An ordered event's DONE does not linger: the key's next event is
// delivered only once it is written (core.OrderedStore promotes it in the
// same transaction), so a batch that holds one, or takes one in while it
// lingers, is written at once with what has already arrived. Batches of
// ordered outcomes still grow while a write is under way.
//
// The channel is bounded (2*DoneBatchSize, at least 1024 ops, no payloads):
// when the database falls behind, workers block in add, stop taking events,
// and the queues fill up and refuse further ones, which then wait in the
// table. Memory stays bounded.
type doneBatcher struct {
	d      *Dispatcher
	what   string // "DONE", or "delete" with Config.DeleteDelivered, for logs
	size   int
	linger time.Duration
	in     chan writeOp  // closed at shutdown once every worker has exited
	done   chan struct{} // closed when run has written everything and exited
}

// recordFunc records the delivery of ids leased by owner in one call:
// core.BatchMarker.MarkDoneBatch or core.DoneDeleter.DeleteDoneBatch.
type recordFunc func(ctx context.Context, owner string, ids []string, now time.Time) (int64, error)

func newDoneBatcher(d *Dispatcher, what string) *doneBatcher {
	size := d.cfg.DoneBatchSize
	return &doneBatcher{
		d: d, what: what, size: size, linger: d.cfg.DoneBatchLinger,
		// Room for the next batches while one is being written, so that a
		// slow write does not stall the workers at once.
		in:   make(chan writeOp, max(2*size, 1024)),
		done: make(chan struct{}),
	}
}

// urgent reports whether op's DONE is not to linger: that of an ordered
// event, whose key's next delivery waits for it.
func (b *doneBatcher) urgent(op writeOp) bool {
	return b.d.ordered != nil && op.kind == writeDone && op.e.seq != 0
}

// add hands over a delivered event's DONE; it blocks while the batcher is
// full.
func (b *doneBatcher) add(op writeOp) { b.in <- op }

// run collects and writes batches until in is closed and drained. ctx carries
// the values of Start's context; its cancellation is ignored, since outcomes
// must be written even while shutting down.
func (b *doneBatcher) run(ctx context.Context) {
	defer close(b.done)
	ctx = context.WithoutCancel(ctx)
	batch := make([]writeOp, 0, b.size)
	linger := time.NewTimer(b.linger)
	linger.Stop()
	for {
		op, ok := <-b.in
		if !ok {
			return
		}
		batch = append(batch[:0], op)
		closed := false
		urgent := b.urgent(op)
		if !urgent {
			linger.Reset(b.linger)
		}
	collect:
		for len(batch) < b.size {
			if urgent {
				// What has arrived, without waiting for more.
				select {
				case op, ok := <-b.in:
					if !ok {
						closed = true
						break collect
					}
					batch = append(batch, op)
					continue
				default:
					break collect
				}
			}
			select {
			case op, ok := <-b.in:
				if !ok {
					closed = true
					break collect
				}
				batch = append(batch, op)
				urgent = b.urgent(op)
			case <-linger.C:
				break collect
			}
		}
		linger.Stop()
		if failed := b.d.apply(ctx, batch); len(failed) > 0 {
			b.d.pending.keep(b.d, failed)
		}
		if closed {
			return
		}
	}
}
