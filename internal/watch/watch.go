// Package watch keeps a store's wake-up source (core.WakeSource) listening
// for the component that reads on its signal: the poller, and the position
// reader. Each reads on a timer as well, so a lost watch only delays
// events written elsewhere until the next read.
package watch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/outboxlog"
)

const (
	// backoff is the first wait before a lost watch connection is opened
	// again; it doubles up to maxBackoff.
	backoff = 100 * time.Millisecond
	// maxBackoff caps the wait between reconnections.
	maxBackoff = 5 * time.Second
	// stable is how long a watch session must have lasted for its end to
	// count as a new failure rather than one more of a series.
	stable = 30 * time.Second
)

// Logs are the owner's two log lines: Unable when the source cannot watch
// at all (core.ErrInvalid: a pool that cannot give a dedicated connection),
// Lost when a watch ended and will be opened again.
type Logs struct{ Unable, Lost string }

// Run calls src.Watch with wake until ctx is done, opening the connection
// again after each failure with a growing back-off. It returns when ctx is
// done, or at once when the source cannot watch.
func Run(ctx context.Context, src core.WakeSource, db core.DBTX, wake func(), log *slog.Logger, logs Logs) {
	failures := 0
	for {
		started := time.Now()
		err := src.Watch(ctx, db, wake)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, core.ErrInvalid) {
			log.LogAttrs(ctx, slog.LevelError, logs.Unable, outboxlog.Err(err))
			return
		}
		if time.Since(started) >= stable {
			failures = 0
		}
		failures++
		wait := min(maxBackoff, backoff<<min(failures-1, 16))
		log.LogAttrs(ctx, slog.LevelWarn, logs.Lost,
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
