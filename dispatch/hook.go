package dispatch

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/core"
)

// WriterHook returns the hook that feeds the hot queue; pass it as
// core.WriterConfig.Hook. Its LeaseOwner is d.Owner(), so the Writer inserts
// the events of a transaction that carries after-commit callbacks (see
// package txctx) already leased by this dispatcher, and no other instance's
// poller claims them while they wait in this process.
//
// After commit the hook enqueues each event on the hot queue. An event the
// hot queue refuses (full or closing), or one not yet deliverable (its
// NotBefore is in the future), has its lease released at once, in a single
// statement, so that a poller delivers it; a refusal counts
// Metrics.HotDropped and logs a warning: one line a second, with the
// refusals of that second summed (outboxlog.Sum). A release that fails is tried
// again in the background, with backoff, until it lands or the dispatcher
// closes. The write itself never fails because of the hook. After a rollback
// the hook does nothing: the rows do not exist.
//
// Having queued events, the hook yields the committing goroutine's processor
// once, so that a worker starts on them at once (Config.NoYieldAfterCommit).
func (d *Dispatcher) WriterHook() core.LeasingHook { return writerHook{d} }

type writerHook struct{ d *Dispatcher }

// refusedMsg is the warning of events the hot queue refused, summed a
// second at a time (Dispatcher.refused).
const refusedMsg = "outbox hot queue refused events; left for the poller"

// LeaseOwner implements core.LeasingHook.
func (h writerHook) LeaseOwner() string { return h.d.owner }

// BeforeWrite implements core.WriterHook; it writes envs unchanged.
func (writerHook) BeforeWrite(_ context.Context, envs []core.Envelope) ([]core.Envelope, error) {
	return envs, nil
}

// AfterWrite implements core.WriterHook; it does nothing.
func (writerHook) AfterWrite(context.Context, []core.Envelope) error { return nil }

// AfterRollback implements core.WriterHook; it does nothing.
func (writerHook) AfterRollback(context.Context, []core.Envelope) error { return nil }

// AfterCommit implements core.WriterHook: it hands the committed events to the
// hot queue and releases the ones it cannot take.
func (h writerHook) AfterCommit(ctx context.Context, envs []core.Envelope) error {
	d := h.d
	now := d.cfg.Now()
	var (
		refused   []string
		later     []string
		dueAt     = now
		anyQueued bool
		// The oldest created_at of each, from which the poller claims
		// (a zero one, not known, is the oldest: from the oldest row).
		refusedFrom, laterFrom time.Time
	)
	for _, env := range envs {
		ev := core.Event{
			Envelope:    env,
			Status:      core.StatusNew,
			CreatedAt:   env.OccurredAt(),
			AvailableAt: env.AvailableAt(),
			LockedBy:    d.owner,
			LockedAt:    now,
			Seq:         env.Seq(),
		}
		if ev.AvailableAt.After(now) {
			later = append(later, env.ID())
			if len(later) == 1 || ev.AvailableAt.Before(dueAt) {
				dueAt = ev.AvailableAt
			}
			if len(later) == 1 || ev.CreatedAt.Before(laterFrom) {
				laterFrom = ev.CreatedAt
			}
			continue
		}
		switch d.enqueueHot(ev) {
		case queued:
			anyQueued = true
		case held:
			// This dispatcher's poller claimed the row before this hook
			// ran (its insert-time lease expired during a slow commit)
			// and holds it: releasing the lease now would let another
			// instance deliver it too, and fence off this one's DONE.
		default:
			refused = append(refused, env.ID())
			if len(refused) == 1 || ev.CreatedAt.Before(refusedFrom) {
				refusedFrom = ev.CreatedAt
			}
		}
	}
	if anyQueued && d.yield != nil {
		// A worker woken by the queue would otherwise wait for the runtime
		// to wake an idle OS thread for it.
		d.yield()
	}
	if len(refused) > 0 {
		d.refused.Add(ctx, len(refused), slog.String("first_event_id", refused[0]))
	}
	ids := append(refused, later...)
	if len(ids) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.StoreTimeout)
	defer cancel()
	if _, err := d.cfg.Store.Release(rctx, d.cfg.DB, d.owner, ids); err != nil {
		d.cfg.Metrics.StoreError()
		d.releaseLater(d.owner, ids, now)
		return fmt.Errorf("release %d events the hot queue did not take (retrying in the background): %w", len(ids), err)
	}
	if len(refused) > 0 {
		d.notifyDue(now, refusedFrom)
	}
	if len(later) > 0 {
		d.notifyDue(dueAt, laterFrom)
	}
	return nil
}
