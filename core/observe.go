package core

import (
	"context"
	"time"
)

// Metrics receives the outbox's counters and gauges. Labels
// stay low-cardinality: implementations must not key series by event id or
// tenant. Methods are called from hot paths and must not block.
//
// Each delivery counts exactly one of DispatchSuccess (DONE), DispatchFailure
// (a retry was scheduled) and DispatchDead (DEAD). HotDropped counts every
// event the hot queue refused; such events stay in the table for the poller.
type Metrics interface {
	HotEnqueued()
	HotDropped()
	ColdEnqueued()
	DispatchSuccess()
	DispatchFailure()
	DispatchDead()
	// StoreError counts a failed write-back of an outcome; the row is left for
	// the lease to expire and the poller to reclaim.
	StoreError()
	QueueDepths(hot, cold int)
	OldestLag(lag time.Duration)
}

// NopMetrics discards everything. It is the default.
type NopMetrics struct{}

func (NopMetrics) HotEnqueued()            {}
func (NopMetrics) HotDropped()             {}
func (NopMetrics) ColdEnqueued()           {}
func (NopMetrics) DispatchSuccess()        {}
func (NopMetrics) DispatchFailure()        {}
func (NopMetrics) DispatchDead()           {}
func (NopMetrics) StoreError()             {}
func (NopMetrics) QueueDepths(_, _ int)    {}
func (NopMetrics) OldestLag(time.Duration) {}

// LatencyMetrics is an optional capability of a Metrics: the durations
// behind latency histograms. The dispatcher and the poller record them when
// their Metrics has it (found by type assertion), so that a Metrics without
// it keeps working.
type LatencyMetrics interface {
	// DeliveryLatency is the time from an event's commit to the start of
	// its listener call. queue is "hot" (measured from the after-commit
	// hand-off) or "cold" (measured from the later of the row's created_at,
	// the writer's clock, and available_at, when a retry fell due).
	DeliveryLatency(queue string, d time.Duration)
	// ListenerDuration is one listener call, interceptors included.
	ListenerDuration(d time.Duration)
	// ClaimDuration is one claim of the poller, whether it found rows or
	// not.
	ClaimDuration(d time.Duration)
	// WriteBackDuration is one round of outcome write-backs: the outcomes a
	// worker or the DONE batcher writes together (a DONE batch, a RETRY, a
	// DEAD), the statements' own retries included.
	WriteBackDuration(d time.Duration)
}

// Interceptor runs around every dispatch, for cross-cutting concerns such as
// audit, tracing or logging. Before hooks run in registration order and an
// error stops the dispatch (it counts as a listener failure); After hooks run
// in reverse order with the outcome (nil on success) and their errors are only
// logged.
type Interceptor interface {
	Before(ctx context.Context, ev Event) (context.Context, error)
	After(ctx context.Context, ev Event, outcome error) error
}

// InterceptorFuncs builds an Interceptor from optional functions.
type InterceptorFuncs struct {
	BeforeFunc func(ctx context.Context, ev Event) (context.Context, error)
	AfterFunc  func(ctx context.Context, ev Event, outcome error) error
}

// Before calls BeforeFunc if set.
func (f InterceptorFuncs) Before(ctx context.Context, ev Event) (context.Context, error) {
	if f.BeforeFunc == nil {
		return ctx, nil
	}
	return f.BeforeFunc(ctx, ev)
}

// After calls AfterFunc if set.
func (f InterceptorFuncs) After(ctx context.Context, ev Event, outcome error) error {
	if f.AfterFunc == nil {
		return nil
	}
	return f.AfterFunc(ctx, ev, outcome)
}
