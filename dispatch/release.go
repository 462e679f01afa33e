package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Leases this dispatcher failed to give back.
//
// The dispatcher releases the leases of events it will not deliver itself:
// hot-path events the hot queue refused or that are not yet due, and events
// whose delivery shutdown interrupted. When such a release fails (the
// database was unreachable for a moment), the events would wait for their
// lease to expire, the poller's LeaseTimeout (5 minutes by default), before
// any instance delivered them. Instead their ids are kept, and a goroutine
// tries again with backoff until a release lands or the dispatcher shuts
// down, whose last step makes one more attempt.

const (
	releaseRetryMin = 100 * time.Millisecond
	releaseRetryMax = 10 * time.Second
	// maxUnreleased bounds the ids kept for another try; beyond it, leases
	// are left to expire.
	maxUnreleased = 100_000
)

// unreleased is the set of leases whose release failed.
type unreleased struct {
	mu   sync.Mutex
	ids  map[string]string // event id -> lease owner
	kick chan struct{}     // capacity 1: a retry is wanted
}

func newUnreleased() unreleased {
	return unreleased{ids: make(map[string]string), kick: make(chan struct{}, 1)}
}

// add keeps ids for another try and reports how many it dropped because the
// set is full.
func (u *unreleased) add(owner string, ids []string) (dropped int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, id := range ids {
		if len(u.ids) >= maxUnreleased {
			dropped++
			continue
		}
		u.ids[id] = owner
	}
	return dropped
}

// releaseLater keeps ids, whose release by owner failed, for the background
// retry.
func (d *Dispatcher) releaseLater(owner string, ids []string) {
	if dropped := d.unreleased.add(owner, ids); dropped > 0 {
		d.log.Warn().Int("events", dropped).
			Msg("outbox dispatcher keeps too many unreleased leases; these wait for their lease to expire")
	}
	select {
	case d.unreleased.kick <- struct{}{}:
	default:
	}
}

// takeUnreleased empties the set and returns its ids by owner, leaving out
// ids this dispatcher holds again (its poller claimed them once their lease
// expired): releasing those would let another instance deliver them too.
func (d *Dispatcher) takeUnreleased() map[string][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	u := &d.unreleased
	u.mu.Lock()
	defer u.mu.Unlock()
	byOwner := make(map[string][]string)
	for id, owner := range u.ids {
		if _, held := d.tracked[id]; !held {
			byOwner[owner] = append(byOwner[owner], id)
		}
		delete(u.ids, id)
	}
	return byOwner
}

// retryReleases is the background retry: it runs until stop is closed.
func (d *Dispatcher) retryReleases(ctx context.Context, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-d.unreleased.kick:
		}
		for backoff := releaseRetryMin; d.releaseUnreleased(ctx, "again") != nil; backoff = min(2*backoff, releaseRetryMax) {
			timer := time.NewTimer(backoff)
			select {
			case <-stop:
				timer.Stop()
				return
			case <-timer.C:
			}
		}
	}
}

// releaseUnreleased tries once to release every kept lease, one statement
// per owner; those that fail are kept, and when says when in the error.
// After a release lands, the poller is woken to deliver the events.
func (d *Dispatcher) releaseUnreleased(ctx context.Context, when string) error {
	var (
		errs     []error
		released bool
	)
	for owner, ids := range d.takeUnreleased() {
		rctx, cancel := context.WithTimeout(ctx, d.cfg.StoreTimeout)
		_, err := d.cfg.Store.Release(rctx, d.cfg.DB, owner, ids)
		cancel()
		if err != nil {
			d.cfg.Metrics.StoreError()
			d.unreleased.add(owner, ids)
			errs = append(errs, fmt.Errorf("release %d events %s: %w", len(ids), when, err))
			continue
		}
		released = true
	}
	if released {
		d.notifyDue(d.cfg.Now())
	}
	return errors.Join(errs...)
}
