// Package lease keeps the leases a component failed to give back and gives
// them back later, so that their events do not wait for the lease to expire
// (the poller's LeaseTimeout, minutes) before any instance delivers them.
//
// The dispatcher and the poller both release leases of events they will not
// deliver themselves, and both use a Releaser when that release fails (the
// database was unreachable for a moment). They differ only in policy: the
// dispatcher retries in the background with backoff and skips ids it holds
// again; the poller retries at its next cycles and gives up once the leases
// are about to expire. Both make one last try on shutdown.
package lease

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/outboxlog"
)

const (
	// MaxKept bounds the ids a Releaser keeps for another try; beyond it,
	// leases are left to expire, so memory stays bounded while the database
	// is down.
	MaxKept = 100_000
	// retryMin and retryMax bound the backoff of Run.
	retryMin = 100 * time.Millisecond
	retryMax = 10 * time.Second
)

// Policy is how a Releaser gives leases back.
type Policy struct {
	// Release gives back the leases of ids held by owner, in one call. It
	// bounds its own time and counts its own failures; its error is returned
	// by Retry as is. Required.
	Release func(ctx context.Context, owner string, ids []string) error
	// Skip reports an id whose lease must not be released any more: the
	// caller holds the event again (its own poller claimed it once the
	// failed lease expired), and releasing it would let another instance
	// deliver it too. Skipped ids are dropped. Nil: none.
	Skip func(id string) bool
	// GiveUpAfter, when positive, drops every kept id once the oldest was
	// leased that long ago: the leases are about to expire, and the caller
	// may claim the rows again, whose fresh leases must then stay. Zero:
	// try until a release lands.
	GiveUpAfter time.Duration
	// Released, when set, runs after a Retry in which a release landed.
	Released func()
	// Now is the clock GiveUpAfter is measured on. Default time.Now.
	Now func() time.Time
	// Logger receives a warning when ids are dropped. Nil: outboxlog.Default().
	Logger *slog.Logger
	// Who names the caller in log messages, e.g. "outbox poller".
	Who string
}

// Releaser is the set of leases whose release failed, with the policy that
// gives them back. It is safe for concurrent use.
type Releaser struct {
	p    Policy
	kick chan struct{} // capacity 1: a retry is wanted

	mu    sync.Mutex
	kept  []Lease             // in order of first failure
	index map[string]struct{} // ids in kept
	since time.Time           // when the oldest kept lease was taken
}

// Lease is one event's lease: its id and the owner token that holds it.
type Lease struct{ ID, Owner string }

// New returns an empty Releaser with policy p.
func New(p Policy) *Releaser {
	p.Now = config.Clock(p.Now)
	p.Logger = outboxlog.Or(p.Logger)
	return &Releaser{p: p, kick: make(chan struct{}, 1), index: make(map[string]struct{})}
}

// Keep keeps ids, leased by owner at leasedAt and whose release failed, for
// another try, and wakes Run. Ids kept already are not kept twice; beyond
// MaxKept, ids are dropped with a warning.
func (r *Releaser) Keep(owner string, ids []string, leasedAt time.Time) {
	r.mu.Lock()
	if len(r.kept) == 0 || leasedAt.Before(r.since) {
		r.since = leasedAt
	}
	dropped := 0
	for _, id := range ids {
		if _, dup := r.index[id]; dup {
			continue
		}
		if len(r.kept) >= MaxKept {
			dropped++
			continue
		}
		r.index[id] = struct{}{}
		r.kept = append(r.kept, Lease{ID: id, Owner: owner})
	}
	r.mu.Unlock()
	if dropped > 0 {
		r.p.Logger.LogAttrs(context.Background(), slog.LevelWarn,
			r.p.Who+" keeps too many unreleased leases; these wait for their lease to expire", slog.Int("events", dropped))
	}
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Len returns how many leases are kept.
func (r *Releaser) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.kept)
}

// take empties the set and returns what it held.
func (r *Releaser) take() ([]Lease, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ls, since := r.kept, r.since
	r.kept = nil
	clear(r.index)
	return ls, since
}

// Retry tries once to give back every kept lease, one Release call per
// owner, leaving out the ids Skip reports; what fails is kept for the next
// try and the errors are returned joined. With GiveUpAfter, leases kept too
// long are dropped instead, and Retry returns nil.
func (r *Releaser) Retry(ctx context.Context) error {
	ks, since := r.take()
	if len(ks) == 0 {
		return nil
	}
	if r.p.GiveUpAfter > 0 && r.p.Now().Sub(since) >= r.p.GiveUpAfter {
		r.p.Logger.LogAttrs(ctx, slog.LevelWarn, r.p.Who+" gave up releasing leases; they wait for their lease to expire",
			slog.Int("events", len(ks)), slog.String("first_event_id", ks[0].ID))
		return nil
	}
	var (
		errs     []error
		released bool
	)
	for _, g := range ByOwner(ks, r.p.Skip) {
		if err := r.p.Release(ctx, g.Owner, g.IDs); err != nil {
			r.Keep(g.Owner, g.IDs, since)
			errs = append(errs, err)
			continue
		}
		released = true
	}
	if released && r.p.Released != nil {
		r.p.Released()
	}
	return errors.Join(errs...)
}

// Run retries in the background: after each Keep it calls Retry, with
// backoff from 100ms to 10s, until a retry succeeds, then waits for the next
// Keep. It returns when stop is closed; the caller's shutdown makes the last
// try with Retry.
func (r *Releaser) Run(ctx context.Context, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-r.kick:
		}
		for backoff := retryMin; r.Retry(ctx) != nil; backoff = min(2*backoff, retryMax) {
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

// Group is the ids of the leases held by one owner: what one release or one
// batched write-back statement covers, since each is fenced by one owner.
type Group struct {
	Owner string
	IDs   []string
}

// ByOwner splits ls by owner, in order of first appearance, leaving out the
// ids skip reports (nil: none). Almost always there is one owner: the
// dispatcher's, which its poller shares.
func ByOwner(ls []Lease, skip func(id string) bool) []Group {
	var gs []Group
	for _, l := range ls {
		if skip != nil && skip(l.ID) {
			continue
		}
		i := 0
		for i < len(gs) && gs[i].Owner != l.Owner {
			i++
		}
		if i == len(gs) {
			gs = append(gs, Group{Owner: l.Owner, IDs: make([]string, 0, len(ls))})
		}
		gs[i].IDs = append(gs[i].IDs, l.ID)
	}
	return gs
}
