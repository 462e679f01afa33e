// Package delivery holds the rules of a delivery that the dispatcher and the
// outboxtest harness share, so that a unit test drives listeners by the same
// rules production does: a listener panic is a failure, and a failure ends
// DEAD or is retried after a delay.
package delivery

import (
	"context"
	"errors"
	"runtime/debug"
	"time"

	"github.com/outboxkit/outbox/core"
)

// AfterFailure decides what a failed delivery leads to. attempts counts the
// failed deliveries of the event, this one included. The event goes DEAD
// (dead is true) when err is core.Permanent or attempts has reached
// maxAttempts; otherwise it is retried after delay: the core.RetryAfter
// delay of err if it has one (a negative one counts as 0), else policy's.
func AfterFailure(err error, attempts, maxAttempts int, policy core.RetryPolicy) (dead bool, delay time.Duration) {
	var perm *core.PermanentError
	if errors.As(err, &perm) || attempts >= maxAttempts {
		return true, 0
	}
	var ra *core.RetryError
	if errors.As(err, &ra) {
		return false, max(ra.Delay, 0)
	}
	return false, policy.Delay(attempts)
}

// Recover turns a panic of the calling function into a *core.PanicError in
// *err.
// Use it as `defer delivery.Recover(&err)` in a function with a named error
// result.
func Recover(err *error) {
	if r := recover(); r != nil {
		*err = &core.PanicError{Value: r, Stack: debug.Stack()}
	}
}

// MemoryDone is a capability of a store that keeps the DONE of some events
// in memory instead of in their rows: delivery by position, whose reader
// resolves the positions it handed over. ResolveDone records the DONE of
// the event id when the store keeps it so, and reports whether it did; the
// dispatcher then lets the event go at once, without a write-back. For any
// other event it does nothing and reports false.
type MemoryDone interface {
	ResolveDone(ctx context.Context, id string) bool
}
