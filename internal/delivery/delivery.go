// Package delivery holds the rules of a delivery that the dispatcher and the
// outboxtest harness share, so that a unit test drives listeners by the same
// rules production does: a listener panic is a failure, and a failure ends
// DEAD or is retried after a delay.
package delivery

import (
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
