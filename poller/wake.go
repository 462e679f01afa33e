package poller

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/outboxlog"
)

const (
	// watchBackoff is the first wait before a lost watch connection is
	// opened again; it doubles up to watchMaxBackoff.
	watchBackoff = 100 * time.Millisecond
	// watchMaxBackoff caps the wait between watch reconnections. Polls go
	// on meanwhile: only the wake-ups wait.
	watchMaxBackoff = 5 * time.Second
	// watchStable is how long a watch session must have lasted for its end
	// to count as a new failure rather than one more of a series.
	watchStable = 30 * time.Second
)

// startWatch runs the store's wake source, if it has one and Config.NoWatch
// is false, on a goroutine that ends when ctx is done. The returned function
// waits for it.
func (p *Poller) startWatch(ctx context.Context) (wait func()) {
	src, ok := core.StoreAs[core.WakeSource](p.cfg.Store)
	if !ok || p.cfg.NoWatch {
		return func() {}
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.watch(ctx, src) })
	return wg.Wait
}

// watch calls src.Watch until ctx is done, opening the connection again
// after each failure with a growing back-off. A notification calls Wake,
// which coalesces with the wake-ups already pending, so a burst of commits
// costs one poll, or two when it straddles one.
func (p *Poller) watch(ctx context.Context, src core.WakeSource) {
	failures := 0
	for {
		started := time.Now()
		err := src.Watch(ctx, p.cfg.DB, p.Wake)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, core.ErrInvalid) {
			// A pool that cannot give a dedicated connection will not
			// start to: poll only.
			p.log.LogAttrs(ctx, slog.LevelError, "outbox poller cannot watch for new events; it polls only",
				outboxlog.Err(err))
			return
		}
		if time.Since(started) >= watchStable {
			failures = 0
		}
		failures++
		wait := min(watchMaxBackoff, watchBackoff<<min(failures-1, 16))
		p.log.LogAttrs(ctx, slog.LevelWarn, "outbox poller lost its watch connection; polling meanwhile",
			outboxlog.Err(err), slog.Int("consecutive_failures", failures), slog.Int64("retry_in_ms", wait.Milliseconds()))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// pollWait returns the wait before the next poll when the last one found no
// backlog: Interval, or BusyInterval while the outbox is busy, that is for
// BusyFor after a poll that handed events over. Databases without a wake
// source (MySQL, SQLite) thus deliver a steady flow of events written
// elsewhere within about BusyInterval, and cost one claim per Interval when
// idle.
func (p *Poller) pollWait(now, busyUntil time.Time) time.Duration {
	if now.Before(busyUntil) {
		return p.cfg.BusyInterval
	}
	return p.cfg.Interval
}
