// Package poller claims outbox events that the hot path did not deliver and
// hands them to the dispatcher's cold queue.
//
// It is the safety net of the outbox: events the hot queue refused, events of
// a crashed process whose lease expired, events written without an
// after-commit hook, retries that have fallen due and events whose NotBefore
// has passed are all delivered through it. Running a Poller is therefore
// required wherever a dispatch.Dispatcher runs.
//
// Every poll claims with a lease (core.Store.Claim): concurrent pollers, in
// this process or others, never hold the same event at once, and the lease
// owner fences the dispatcher's write-backs. A poll first asks the handler
// how much it can take and claims no more than that; events the handler
// still refuses have their leases released at once instead of waiting for
// them to expire. Rows that cannot be decoded are marked DEAD.
//
// Polls run every Config.Interval, at once again while a backlog drains (a
// poll that filled its batch is followed by another), after Wake, and at the
// times passed to WakeAt, which the dispatcher calls when a retry falls due.
// A failed claim (the database is down, say) is logged and retried with a
// back-off that grows up to the interval; the loop never stops because of it.
package poller
