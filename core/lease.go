package core

import (
	"context"
	"time"
)

// LeaseRenewer is an optional capability of a Store: extending the leases an
// owner holds. The dispatcher renews the lease of every event it holds
// (queued, being delivered, or with its outcome being written) well before
// the lease expires, so that a listener slower than the lease is not
// delivered a second time by another instance, and the lease timeout can be
// short enough for a crashed instance's events to be picked up in seconds.
// Without it (a custom store) the dispatcher does not renew, and a delivery
// that outlives its lease may be claimed and delivered again elsewhere.
//
// It is a separate interface, not a method of Store, so that stores and test
// fakes without it keep working. The dispatcher finds it with StoreAs.
type LeaseRenewer interface {
	// RenewLeases sets locked_at = now on the rows of ids that owner still
	// leases and that are not terminal (DONE or DEAD), and returns the ids
	// whose lease is gone: leased by another owner or by none, terminal, or
	// unknown. It is fenced by owner as MarkDone is, so it never takes a
	// row over. Duplicate ids count once. On error, lost is nil and the
	// leases may or may not have been extended (a store may split a long
	// list into several statements; those that succeeded stay applied).
	RenewLeases(ctx context.Context, db DBTX, owner string, ids []string, now time.Time) (lost []string, err error)
}

// DefaultLeaseTimeout is the default lease of a claimed or hot-path event,
// shared by the dispatcher (dispatch.Config.LeaseTimeout) and the poller.
//
// With lease renewal the lease no longer bounds a delivery; it bounds how
// long the events of a crashed instance wait before another instance claims
// them, and how long a database or network stall may last before a held
// event's lease expires. Thirty seconds keeps the first to seconds-to-half-a-
// minute while the dispatcher renews every 10 s, each renewal bounded by
// 10 s, so that one failed or slow renewal (a failover, a stop-the-world
// pause, a saturated pool) does not yet let another instance take a held
// event; the renewal costs one UPDATE per 10 s per instance while events
// are held, and nothing when idle.
const DefaultLeaseTimeout = 30 * time.Second
