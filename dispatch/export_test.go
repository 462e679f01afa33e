package dispatch

import (
	"log/slog"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/outboxlog"
)

// SetYield replaces what the writer hook runs after queuing events
// (runtime.Gosched unless Config.NoYieldAfterCommit); nil when it runs nothing.
func SetYield(d *Dispatcher, f func()) (had bool) {
	had = d.yield != nil
	if had {
		d.yield = f
	}
	return had
}

// EnqueueHot queues ev on the hot queue as the writer hook does, without
// blocking, and reports whether it was queued: false when the hot queue is
// full, the dispatcher is closing, or ev's id is already queued or in
// flight. Tests use it to feed the hot queue without a store write.
func (d *Dispatcher) EnqueueHot(ev core.Event) bool { return d.enqueueHot(ev) == queued }

// SetLogClock makes the clock of the summed hot-queue warning c, for tests
// that close its window themselves.
func SetLogClock(d *Dispatcher, c outboxlog.Clock) {
	d.refused = outboxlog.NewSum(d.log, slog.LevelWarn, refusedMsg, "events", outboxlog.SumOptions{Clock: c})
}
