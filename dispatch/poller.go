package dispatch

import "github.com/outboxkit/outbox/poller"

// A Dispatcher is the poller's Handler and every optional interface
// poller.New looks for by type assertion: renaming one of these methods
// fails the build here instead of silently costing the poller its owner
// token, its lease timeout or its retry wake-ups.
var (
	_ poller.Handler            = (*Dispatcher)(nil)
	_ poller.OwnerSource        = (*Dispatcher)(nil)
	_ poller.LeaseTimeoutSource = (*Dispatcher)(nil)
	_ poller.DueFromNotifier    = (*Dispatcher)(nil)
	_ poller.DueNotifier        = (*Dispatcher)(nil)
)
