package chaos

import (
	"bufio"
	"context"
	"database/sql"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/outboxkit/outbox/core"
)

// RecordingListener returns the listener of the helper processes: in a
// transaction of its own on db it spends work, as business work would, and
// then records the delivery in d, last, with the process's owner and when
// the listener started and finished, so that a process killed before the
// COMMIT leaves no record and every recorded delivery finished before its
// process died. owner is called per delivery, so that it may be set after
// the listener is built (and before its first call). After each committed
// delivery it calls delivered, when not nil.
func RecordingListener(db *sql.DB, d Deliveries, owner func() string, work time.Duration, delivered func()) func(context.Context, core.Event) error {
	return func(ctx context.Context, ev core.Event) error {
		started := time.Now()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if work > 0 {
			time.Sleep(work) // the business work of the listener
		}
		if err := d.Record(ctx, tx, ev.ID(), owner(), started, time.Now()); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		if delivered != nil {
			delivered()
		}
		return nil
	}
}

// CatchStop registers for the signals that ask the helper process to stop
// and returns the wait for them: it blocks until SIGTERM or SIGINT arrives
// from the supervisor, or stdin closes, which means that the supervisor
// died. Call it before the process says it is ready, so that a stop sent
// right after is not lost to the signal's default action.
func CatchStop() (wait func()) {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	return func() {
		defer signal.Stop(stop)
		orphaned := make(chan struct{})
		go func() { // ends with the process: it only watches stdin
			_, _ = io.Copy(io.Discard, bufio.NewReader(os.Stdin))
			close(orphaned)
		}()
		select {
		case <-stop:
		case <-orphaned:
		}
	}
}
