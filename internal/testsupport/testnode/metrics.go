package testnode

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
)

// Metrics is a core.Metrics that counts its calls, the gauges' (QueueDepths,
// OldestLag) included. It is safe for concurrent use, and its zero value is
// ready.
type Metrics struct {
	hotEnqueued, hotDropped, coldEnqueued atomic.Int64
	success, failure, dead, storeError    atomic.Int64
	depths, lags                          atomic.Int64
}

var _ core.Metrics = (*Metrics)(nil)

// MetricCounts is a snapshot of a Metrics: each field is how many times the
// core.Metrics method of that name was called.
type MetricCounts struct {
	HotEnqueued, HotDropped, ColdEnqueued          int64
	DispatchSuccess, DispatchFailure, DispatchDead int64
	StoreError                                     int64
	QueueDepths, OldestLag                         int64
}

// HotEnqueued implements core.Metrics.
func (m *Metrics) HotEnqueued() { m.hotEnqueued.Add(1) }

// HotDropped implements core.Metrics.
func (m *Metrics) HotDropped() { m.hotDropped.Add(1) }

// ColdEnqueued implements core.Metrics.
func (m *Metrics) ColdEnqueued() { m.coldEnqueued.Add(1) }

// DispatchSuccess implements core.Metrics.
func (m *Metrics) DispatchSuccess() { m.success.Add(1) }

// DispatchFailure implements core.Metrics.
func (m *Metrics) DispatchFailure() { m.failure.Add(1) }

// DispatchDead implements core.Metrics.
func (m *Metrics) DispatchDead() { m.dead.Add(1) }

// StoreError implements core.Metrics.
func (m *Metrics) StoreError() { m.storeError.Add(1) }

// QueueDepths implements core.Metrics; it counts the calls, not the depths.
func (m *Metrics) QueueDepths(int, int) { m.depths.Add(1) }

// OldestLag implements core.Metrics; it counts the calls, not the lags.
func (m *Metrics) OldestLag(time.Duration) { m.lags.Add(1) }

// Counts returns the counts so far. Each is read atomically, not all of them
// at one instant: read them once the node is closed to compare them.
func (m *Metrics) Counts() MetricCounts {
	return MetricCounts{
		HotEnqueued:     m.hotEnqueued.Load(),
		HotDropped:      m.hotDropped.Load(),
		ColdEnqueued:    m.coldEnqueued.Load(),
		DispatchSuccess: m.success.Load(),
		DispatchFailure: m.failure.Load(),
		DispatchDead:    m.dead.Load(),
		StoreError:      m.storeError.Load(),
		QueueDepths:     m.depths.Load(),
		OldestLag:       m.lags.Load(),
	}
}

// String summarises the counts for a test log.
func (m *Metrics) String() string {
	c := m.Counts()
	return fmt.Sprintf("hot enqueued %d, hot dropped %d, cold enqueued %d, done %d, retries %d, dead %d, store errors %d",
		c.HotEnqueued, c.HotDropped, c.ColdEnqueued, c.DispatchSuccess, c.DispatchFailure, c.DispatchDead, c.StoreError)
}
