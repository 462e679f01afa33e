package poller

import (
	"context"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/watch"
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

// watch keeps src watching until ctx is done. A notification calls Wake,
// which coalesces with the wake-ups already pending, so a burst of commits
// costs one poll, or two when it straddles one.
func (p *Poller) watch(ctx context.Context, src core.WakeSource) {
	watch.Run(ctx, src, p.cfg.DB, p.Wake, p.log, watch.Logs{
		Unable: "outbox poller cannot watch for new events; it polls only",
		Lost:   "outbox poller lost its watch connection; polling meanwhile",
	})
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
