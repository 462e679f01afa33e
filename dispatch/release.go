package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/internal/lease"
)

// Leases this dispatcher failed to give back.
//
// The dispatcher releases the leases of events it will not deliver itself:
// hot-path events the hot queue refused or that are not yet due, and events
// whose delivery shutdown interrupted. When such a release fails (the
// database was unreachable for a moment), the events would wait for their
// lease to expire, Config.LeaseTimeout (30 seconds by default), before
// any instance delivered them. Instead their ids are kept in a
// lease.Releaser, and a goroutine tries again with backoff until a release
// lands or the dispatcher shuts down, whose last step makes one more
// attempt. Ids this dispatcher holds again by then (its poller claimed them
// once their lease expired) are left out: releasing those would let another
// instance deliver them too.

// newReleaser returns the dispatcher's lease.Releaser: one Release per owner,
// bounded by StoreTimeout; the poller is woken once a release lands, to
// deliver the events.
func (d *Dispatcher) newReleaser() *lease.Releaser {
	return lease.New(lease.Policy{
		Release: func(ctx context.Context, owner string, ids []string) error {
			rctx, cancel := context.WithTimeout(ctx, d.cfg.StoreTimeout)
			defer cancel()
			if _, err := d.cfg.Store.Release(rctx, d.cfg.DB, owner, ids); err != nil {
				d.cfg.Metrics.StoreError()
				return fmt.Errorf("release %d events: %w", len(ids), err)
			}
			return nil
		},
		Skip:     d.inflight.held,
		Released: func() { d.notifyDue(d.cfg.Now(), time.Time{}) },
		Now:      d.cfg.Now,
		Logger:   d.log,
		Who:      "outbox dispatcher",
	})
}

// releaseLater keeps ids, whose release by owner failed, for the background
// retry.
func (d *Dispatcher) releaseLater(owner string, ids []string, leasedAt time.Time) {
	d.releaser.Keep(owner, ids, leasedAt)
}
