package poller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/lease"
	"github.com/outboxkit/outbox/internal/lifecycle"
	"github.com/outboxkit/outbox/outboxlog"
)

const (
	// followUpTimeout bounds the writes that follow a claim (releasing
	// refused events, marking undecodable ones DEAD). They run on a context
	// that shutdown does not cancel, so that a claim never strands leases.
	followUpTimeout = 10 * time.Second
	// backlogPause is the wait between capacity checks while a backlog is
	// pending and the handler is full: checking costs no database round trip.
	backlogPause = 20 * time.Millisecond
	// errorBackoff is the first wait after a failed cycle; it doubles up to
	// the interval.
	errorBackoff = 100 * time.Millisecond
	// dueSlack is added to requested wake-up times so that a row whose
	// available_at was rounded up by the database is due when we claim.
	dueSlack = time.Millisecond
	// fromSlack is taken off the creation times passed to WakeAtFrom, in
	// case a store keeps them to a coarser unit than the event had.
	fromSlack = time.Millisecond
)

// Poller claims deliverable events from the outbox table with a lease and
// hands them to a Handler, normally the dispatcher's cold queue. It never
// claims more than the handler can take, and releases at once the leases of
// events the handler refuses (a release that fails is tried again in the
// next cycles).
//
// A Poller is safe for concurrent use. Its lifecycle is New, Start, Close;
// PollOnce runs one cycle without Start.
type Poller struct {
	cfg Config
	log *slog.Logger

	loop lifecycle.Loop

	sched *schedule     // which claim is due next, from where, how large
	wake  chan struct{} // capacity 1: a wake-up earlier than the loop waits for

	// Refused events whose release failed; released again at the start of
	// the next cycles, and once more when the poller stops.
	releaser *lease.Releaser
}

// New validates cfg and returns a Poller. Bad configuration returns an error
// matching core.ErrInvalid. If cfg.Handler is a DueFromNotifier, New
// subscribes the poller's WakeAtFrom to it; otherwise, if it is a
// DueNotifier, its WakeAt.
func New(cfg Config) (*Poller, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Poller{
		cfg:   cfg,
		log:   outboxlog.Or(cfg.Logger).With("component", "outbox.poller"),
		wake:  make(chan struct{}, 1),
		sched: newSchedule(cfg),
	}
	p.releaser = lease.New(lease.Policy{
		Release: func(ctx context.Context, owner string, ids []string) error {
			rctx, cancel := context.WithTimeout(ctx, followUpTimeout)
			defer cancel()
			if _, err := p.cfg.Store.Release(rctx, p.cfg.DB, owner, ids); err != nil {
				p.cfg.Metrics.StoreError()
				return fmt.Errorf("release %d refused events again: %w", len(ids), err)
			}
			return nil
		},
		// Once half the lease timeout has passed since their claim, the
		// leases are about to expire, and this poller may claim the rows
		// again and its handler take them, whose leases must then stay.
		GiveUpAfter: cfg.LeaseTimeout / 2,
		// The released rows may lie behind where claims start now.
		Released: func() { p.sched.released(p.cfg.Now()) },
		Now:      cfg.Now,
		Logger:   p.log,
		Who:      "outbox poller",
	})
	switch n := cfg.Handler.(type) {
	case DueFromNotifier:
		n.NotifyDueFrom(p.WakeAtFrom)
	case DueNotifier:
		n.NotifyDue(p.WakeAt)
	}
	return p, nil
}

// Owner returns the lease owner token the poller claims with.
func (p *Poller) Owner() string { return p.cfg.Owner }

// LeaseTimeout returns the lease the poller claims with (Config.LeaseTimeout,
// defaults applied).
func (p *Poller) LeaseTimeout() time.Duration { return p.cfg.LeaseTimeout }

// Start launches the polling loop and returns at once; the first poll runs
// immediately. It returns core.ErrAlreadyStarted if the poller was started
// before and core.ErrClosed after Close. Cancelling ctx stops the poller as
// Close does.
func (p *Poller) Start(ctx context.Context) error {
	return p.loop.Start(ctx, p.run)
}

// Close stops the poller: no cycle starts after it is called, and a cycle in
// progress finishes (its claimed events are handed over or released) unless
// ctx is done first, which cancels it. Close returns when the polling
// goroutine has exited. It is idempotent and safe to call concurrently, and
// always returns nil.
func (p *Poller) Close(ctx context.Context) error { return p.loop.Close(ctx) }

// Wake asks for a poll now. It never blocks; wake-ups requested while one is
// pending coalesce into one poll.
func (p *Poller) Wake() { p.WakeAt(time.Time{}) }

// WakeAt asks for a poll at t (a zero or past t means now), earlier than the
// interval would run it. It never blocks. Every pending request is kept (up
// to 4096; later ones wait for the interval): a poll serves the requests due
// by then, and the next one runs at the earliest request left. The rows
// that fall due at t may lie behind where claims start, so a claim from the
// oldest row serves it (see WakeAtFrom).
func (p *Poller) WakeAt(t time.Time) { p.WakeAtFrom(t, time.Time{}) }

// WakeAtFrom is WakeAt for rows created at or after from (their created_at
// as the store returns it; a zero from: not known): the claim that serves it
// starts at from, not at the oldest row, so it does not walk what has been
// delivered since the oldest row (see Config.BatchSize). The dispatcher
// calls it when a retry falls due and when it releases events it has not
// delivered.
func (p *Poller) WakeAtFrom(t, from time.Time) {
	now := p.cfg.Now()
	if t.Before(now) {
		t = now
	} else {
		t = t.Add(dueSlack)
	}
	// A store keeps created_at to the microsecond or less: fromSlack
	// covers it.
	if !from.IsZero() {
		from = from.Add(-fromSlack)
	}
	if p.sched.wakeAt(t, from) {
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

// PollOnce runs one cycle: it claims up to min(the claim size, the
// handler's capacity) due events (the claim size is BatchSize, or more while
// a backlog drains: see Config.BatchSize), marks undecodable ones DEAD,
// hands the rest to the handler and releases those it refuses. It returns how many events the
// handler took. It returns core.ErrClosed after Close; a failed claim returns
// an error and changes nothing.
func (p *Poller) PollOnce(ctx context.Context) (int, error) {
	if p.loop.Closed() {
		return 0, core.ErrClosed
	}
	c, err := p.poll(ctx)
	return c.taken, err
}

// cycle is what one poll did.
type cycle struct {
	skipped bool // the handler had no capacity
	full    bool // the claim returned as many rows as asked: a backlog is likely
	taken   int  // events the handler took
}

func (p *Poller) poll(ctx context.Context) (cycle, error) {
	rerr := p.releaser.Retry(ctx)
	c, err := p.claim(ctx)
	return c, errors.Join(rerr, err)
}

// claim claims what the handler has room for and hands it over.
func (p *Poller) claim(ctx context.Context) (cycle, error) {
	var c cycle
	capacity := p.cfg.Handler.ColdCapacity()
	if capacity <= 0 || p.sched.waitForRoom(capacity) {
		c.skipped = true
		return c, nil
	}
	now := p.cfg.Now()
	pl := p.sched.next(now)
	limit := min(pl.size, capacity)
	cctx, cancelClaim := context.WithTimeout(ctx, p.cfg.ClaimTimeout)
	defer cancelClaim()
	start := time.Now()
	events, bad, err := p.cfg.Store.Claim(cctx, p.cfg.DB, core.ClaimParams{
		Owner:        p.cfg.Owner,
		Now:          now,
		LeaseTimeout: p.cfg.LeaseTimeout,
		SkipRecent:   p.cfg.SkipRecent,
		Limit:        limit,
		From:         pl.from,
	})
	took := time.Since(start)
	if lm, ok := p.cfg.Metrics.(core.LatencyMetrics); ok {
		lm.ClaimDuration(took)
	}
	if err != nil {
		p.cfg.Metrics.StoreError()
		p.sched.failed(now)
		return c, fmt.Errorf("poller: %w", err)
	}

	// What follows must happen even if ctx is cancelled now: the rows are
	// leased by us.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), followUpTimeout)
	defer cancel()
	var errs []error
	for _, b := range bad {
		p.log.LogAttrs(ctx, slog.LevelError, "outbox event cannot be decoded; marking DEAD",
			slog.String("event_id", b.ID), outboxlog.Err(b.Err))
		p.cfg.Metrics.DispatchDead()
		if _, err := p.cfg.Store.MarkDead(fctx, p.cfg.DB, p.cfg.Owner, b.ID, now, core.TruncateError(b.Error())); err != nil {
			p.cfg.Metrics.StoreError()
			errs = append(errs, fmt.Errorf("mark undecodable event %s dead: %w", b.ID, err))
		}
	}
	var (
		refused  []string
		released time.Time // the oldest refused row's created_at
	)
	for _, ev := range events {
		ev.LockedBy = p.cfg.Owner // the dispatcher fences its write-backs with it
		if ev.LockedAt.IsZero() {
			ev.LockedAt = now
		}
		if p.cfg.Handler.EnqueueCold(ev) {
			c.taken++
		} else {
			refused = append(refused, ev.ID())
			if released.IsZero() || ev.CreatedAt.Before(released) {
				released = ev.CreatedAt
			}
		}
	}
	// A batch the handler refused entirely is no backlog to chase: polling
	// again at once would only claim the same rows again.
	c.full = len(events)+len(bad) >= limit && (c.taken > 0 || len(events) == 0)
	var last time.Time
	for _, ev := range events {
		if ev.CreatedAt.After(last) {
			last = ev.CreatedAt
		}
	}
	p.sched.done(now, pl, len(events)+len(bad) >= limit, len(refused) == 0, released, last, took)
	if len(refused) > 0 {
		if _, err := p.cfg.Store.Release(fctx, p.cfg.DB, p.cfg.Owner, refused); err != nil {
			p.cfg.Metrics.StoreError()
			p.releaser.Keep(p.cfg.Owner, refused, now)
			errs = append(errs, fmt.Errorf("release %d refused events (trying again next cycle): %w", len(refused), err))
		}
	}
	if len(events)+len(bad) > 0 {
		p.log.LogAttrs(ctx, slog.LevelDebug, "outbox poll",
			slog.Int("claimed", len(events)+len(bad)), slog.Int("enqueued", c.taken), slog.Int("refused", len(refused)), slog.Int("undecodable", len(bad)))
	}
	return c, errors.Join(errs...)
}

// run is the polling loop.
func (p *Poller) run(ctx context.Context, stop <-chan struct{}) {
	// The watcher is owned by this loop: it stops when the loop returns
	// (cancel runs before the wait, as defers run last first).
	wctx, cancel := context.WithCancel(ctx)
	defer p.startWatch(wctx)()
	defer cancel()
	var (
		backlog   bool
		failures  int
		busyUntil time.Time // polls run every BusyInterval until then
	)
	for {
		c, err := p.poll(ctx)
		if c.taken > 0 {
			busyUntil = p.cfg.Now().Add(p.cfg.BusyFor)
		}
		var wait time.Duration
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return // Close gave up waiting
			}
			failures++
			wait = min(p.cfg.Interval, errorBackoff<<min(failures-1, 16))
			p.log.LogAttrs(ctx, slog.LevelError, "outbox poll failed",
				outboxlog.Err(err), slog.Int("consecutive_failures", failures), slog.Int64("retry_in_ms", wait.Milliseconds()))
		case c.skipped && backlog:
			failures, wait = 0, backlogPause
		case c.skipped:
			failures, wait = 0, p.cfg.Interval
		case c.full:
			// Drain a backlog fast: poll again at once.
			failures, backlog, wait = 0, true, 0
		default:
			failures, backlog, wait = 0, false, p.pollWait(p.cfg.Now(), busyUntil)
		}
		if !p.sleep(stop, wait) {
			// One last try, bounded by Close's context.
			if err := p.releaser.Retry(ctx); err != nil {
				p.log.LogAttrs(ctx, slog.LevelError, "outbox poller stopped with unreleased leases; they wait for their lease to expire",
					outboxlog.Err(err))
			}
			return
		}
	}
}

// sleep waits for wait, or less if a wake-up is due earlier. It returns false
// when the poller is stopping.
func (p *Poller) sleep(stop <-chan struct{}, wait time.Duration) bool {
	deadline := p.cfg.Now().Add(wait)
	for {
		select {
		case <-stop:
			return false
		default:
		}
		target := deadline
		if next, ok := p.sched.firstWake(); ok && next.Before(target) {
			target = next
		}
		now := p.cfg.Now()
		if target.Sub(now) <= 0 {
			p.sched.polling(now)
			return true
		}
		timer := time.NewTimer(target.Sub(now))
		select {
		case <-stop:
			timer.Stop()
			return false
		case <-p.wake:
			timer.Stop() // recompute the target
		case <-timer.C:
			// At least target: a Now that lags the timer (a test clock)
			// must still drop the request the timer was for.
			p.sched.polling(latest(target, p.cfg.Now()))
			return true
		}
	}
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
