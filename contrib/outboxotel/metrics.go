package outboxotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/outboxkit/outbox/core"
)

// NewMetrics returns a core.Metrics for dispatch.Config.Metrics and
// poller.Config.Metrics (or outbox.Config.Metrics) that records on
// cfg.MeterProvider's meter:
//
//	outbox.hot.enqueued      counter  events handed to the hot queue after commit
//	outbox.hot.dropped       counter  events the full hot queue refused (left to the poller)
//	outbox.cold.enqueued     counter  events the poller handed to the cold queue
//	outbox.dispatch          counter  outcomes, attribute outbox.result: success, failure, dead
//	outbox.store.errors      counter  failed store operations (claims, outcome write-backs)
//	outbox.queue.depth       gauge    events waiting, attribute outbox.queue: hot, cold
//	outbox.oldest_lag        gauge    age of the event a worker took most recently, in seconds
//	outbox.delivery.latency  histogram  commit to listener start, in seconds, attribute outbox.queue: hot, cold
//	outbox.listener.duration histogram  one listener call, in seconds
//	outbox.claim.duration    histogram  one claim of the poller, in seconds
//	outbox.writeback.duration histogram one round of outcome write-backs, in seconds
//
// They mean what the Prometheus exporter's series of the same names mean
// (package metrics/prometheus). The backlog counts the Prometheus Sampler
// takes from the table have no counterpart here yet.
func NewMetrics(cfg Config) (core.Metrics, error) {
	mp := cfg.MeterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("{event}"))
		errs = append(errs, err)
		return c
	}
	om := &otelMetrics{
		hotEnqueued:  counter("outbox.hot.enqueued", "Events handed to the hot queue after commit."),
		hotDropped:   counter("outbox.hot.dropped", "Events the full hot queue refused; the poller delivers them later."),
		coldEnqueued: counter("outbox.cold.enqueued", "Events the poller handed to the cold queue."),
		dispatch:     counter("outbox.dispatch", "Delivery outcomes: success (DONE), failure (RETRY), dead (DEAD)."),
	}
	var err error
	om.storeErrors, err = m.Int64Counter("outbox.store.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Failed store operations: claims and outcome write-backs."))
	errs = append(errs, err)
	om.depth, err = m.Int64Gauge("outbox.queue.depth", metric.WithUnit("{event}"),
		metric.WithDescription("Events waiting in the dispatcher's in-memory queues."))
	errs = append(errs, err)
	om.lag, err = m.Float64Gauge("outbox.oldest_lag", metric.WithUnit("s"),
		metric.WithDescription("Age of the event a worker took most recently."))
	errs = append(errs, err)
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithDescription(desc), metric.WithUnit("s"))
		errs = append(errs, err)
		return h
	}
	om.latency = histogram("outbox.delivery.latency", "Time from an event's commit to the start of its listener call.")
	om.listener = histogram("outbox.listener.duration", "Duration of one listener call, interceptors included.")
	om.claim = histogram("outbox.claim.duration", "Duration of one claim of the poller.")
	om.writeBack = histogram("outbox.writeback.duration", "Duration of one round of outcome write-backs.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return om, nil
}

var (
	resultSuccess = metric.WithAttributeSet(attribute.NewSet(attribute.String("outbox.result", "success")))
	resultFailure = metric.WithAttributeSet(attribute.NewSet(attribute.String("outbox.result", "failure")))
	resultDead    = metric.WithAttributeSet(attribute.NewSet(attribute.String("outbox.result", "dead")))
	queueHot      = metric.WithAttributeSet(attribute.NewSet(attribute.String("outbox.queue", "hot")))
	queueCold     = metric.WithAttributeSet(attribute.NewSet(attribute.String("outbox.queue", "cold")))
)

type otelMetrics struct {
	hotEnqueued, hotDropped, coldEnqueued, dispatch, storeErrors metric.Int64Counter
	depth                                                        metric.Int64Gauge
	lag                                                          metric.Float64Gauge
	latency, listener, claim, writeBack                          metric.Float64Histogram
}

var _ core.LatencyMetrics = (*otelMetrics)(nil)

// The dispatcher calls these on its hot path with no context; the
// instruments need one only for exemplars, which a background context
// cannot carry anyway.
var bg = context.Background()

func (m *otelMetrics) HotEnqueued()     { m.hotEnqueued.Add(bg, 1) }
func (m *otelMetrics) HotDropped()      { m.hotDropped.Add(bg, 1) }
func (m *otelMetrics) ColdEnqueued()    { m.coldEnqueued.Add(bg, 1) }
func (m *otelMetrics) DispatchSuccess() { m.dispatch.Add(bg, 1, resultSuccess) }
func (m *otelMetrics) DispatchFailure() { m.dispatch.Add(bg, 1, resultFailure) }
func (m *otelMetrics) DispatchDead()    { m.dispatch.Add(bg, 1, resultDead) }
func (m *otelMetrics) StoreError()      { m.storeErrors.Add(bg, 1) }
func (m *otelMetrics) QueueDepths(hot, cold int) {
	m.depth.Record(bg, int64(hot), queueHot)
	m.depth.Record(bg, int64(cold), queueCold)
}
func (m *otelMetrics) OldestLag(lag time.Duration) { m.lag.Record(bg, lag.Seconds()) }

func (m *otelMetrics) DeliveryLatency(queue string, d time.Duration) {
	attrs := queueCold
	if queue == "hot" {
		attrs = queueHot
	}
	m.latency.Record(bg, d.Seconds(), attrs)
}
func (m *otelMetrics) ListenerDuration(d time.Duration)  { m.listener.Record(bg, d.Seconds()) }
func (m *otelMetrics) ClaimDuration(d time.Duration)     { m.claim.Record(bg, d.Seconds()) }
func (m *otelMetrics) WriteBackDuration(d time.Duration) { m.writeBack.Record(bg, d.Seconds()) }
