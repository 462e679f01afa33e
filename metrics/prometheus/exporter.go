// Package prometheus exports the outbox's metrics to Prometheus: an Exporter
// implementing core.Metrics for the dispatcher and poller, and a Sampler that
// counts pending, retrying and dead rows in the database on an interval.
//
// Every series is low-cardinality: the only variable labels are result
// (success, failure, dead) and queue (hot, cold). No event id, tenant id or
// aggregate id ever becomes a label. To run several outboxes in one process,
// give each its own ConstLabels (for instance {"outbox": "orders"}) on the
// same Registerer.
//
// The package name clashes with client_golang's; import it under another
// name:
//
//	import outboxprom "github.com/outboxkit/outbox/metrics/prometheus"
//
//	exp, err := outboxprom.New(outboxprom.Config{
//		Registerer:  prometheus.DefaultRegisterer,
//		ConstLabels: prometheus.Labels{"outbox": "orders"},
//	})
//	d, err := dispatch.New(dispatch.Config{..., Metrics: exp})
//	p, err := poller.New(poller.Config{..., Metrics: exp})
//
// Series (with the default namespace "outbox"):
//
//	outbox_hot_enqueued_total          events handed to the hot queue after commit
//	outbox_hot_dropped_total           events the full hot queue refused (left to the poller)
//	outbox_cold_enqueued_total         events the poller handed to the cold queue
//	outbox_dispatch_total{result}      outcomes: success (DONE), failure (RETRY), dead (DEAD)
//	outbox_store_errors_total          failed store operations (claims, outcome write-backs)
//	outbox_queue_depth{queue}          events waiting in the hot and cold queues
//	outbox_oldest_lag_seconds          age of the event a worker took most recently
//	outbox_delivery_latency_seconds{queue}  histogram: commit to listener start, hot and cold path apart
//	outbox_listener_duration_seconds   histogram: one listener call
//	outbox_claim_duration_seconds      histogram: one claim of the poller
//	outbox_writeback_duration_seconds  histogram: one round of outcome write-backs
//
// and, from a Sampler:
//
//	outbox_pending_events              NEW rows
//	outbox_retrying_events             RETRY rows
//	outbox_dead_events                 DEAD rows
//	outbox_oldest_pending_age_seconds  age of the oldest NEW or RETRY row (0 when none)
//	outbox_sample_errors_total         failed samples
//	outbox_last_sample_timestamp_seconds  time of the last successful sample
//
// Every event a worker takes from a queue (hot_enqueued + cold_enqueued)
// ends in exactly one dispatch_total result, unless its outcome could not be
// written (store_errors_total) or shutdown handed it back to the database.
// The poller also counts undecodable rows it marks DEAD as result="dead".
//
// The folder monitoring/ beside this package holds a Grafana dashboard
// (dashboard.json) and Prometheus alert rules (alerts.yml, with promtool unit
// tests in alerts_test.yml) for these series.
package prometheus

import (
	"fmt"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox/core"
)

// DefaultNamespace prefixes every metric name when Config.Namespace is empty.
const DefaultNamespace = "outbox"

// Config says where the exporter registers its metrics and how they are
// named.
type Config struct {
	// Registerer receives the collectors, e.g. prometheus.DefaultRegisterer
	// or a prometheus.NewRegistry(). Required.
	Registerer prom.Registerer
	// Namespace is the first part of every metric name. Default "outbox".
	Namespace string
	// Subsystem, when set, goes between the namespace and the name, e.g.
	// "orders" gives outbox_orders_dispatch_total.
	Subsystem string
	// ConstLabels are added to every series, e.g. {"outbox": "orders"} to
	// tell apart several outboxes registered on one Registerer. Keep them
	// constant per process: never an event or tenant id.
	ConstLabels prom.Labels
}

func (c Config) namespace() string {
	if c.Namespace == "" {
		return DefaultNamespace
	}
	return c.Namespace
}

func (c Config) counterOpts(name, help string) prom.CounterOpts {
	return prom.CounterOpts{Namespace: c.namespace(), Subsystem: c.Subsystem, Name: name, Help: help,
		ConstLabels: c.ConstLabels}
}

func (c Config) gaugeOpts(name, help string) prom.GaugeOpts {
	return prom.GaugeOpts{Namespace: c.namespace(), Subsystem: c.Subsystem, Name: name, Help: help,
		ConstLabels: c.ConstLabels}
}

// Exporter implements core.Metrics with Prometheus counters and gauges. Its
// methods never block; it is safe for concurrent use.
type Exporter struct {
	hotEnqueued  prom.Counter
	hotDropped   prom.Counter
	coldEnqueued prom.Counter
	success      prom.Counter
	failure      prom.Counter
	dead         prom.Counter
	storeErrors  prom.Counter
	hotDepth     prom.Gauge
	coldDepth    prom.Gauge
	oldestLag    prom.Gauge

	hotLatency, coldLatency prom.Observer
	listener, claim, write  prom.Observer
}

var (
	_ core.Metrics        = (*Exporter)(nil)
	_ core.LatencyMetrics = (*Exporter)(nil)
)

// Histogram buckets, in seconds: 0.5 ms to about 16 s for delivery latency
// and listener calls (a hot-path delivery takes microseconds to a
// millisecond, a polled one up to the poll interval, a retry its backoff),
// 0.5 ms to about 4 s for statements.
var (
	latencyBuckets   = prom.ExponentialBuckets(0.0005, 2, 16)
	statementBuckets = prom.ExponentialBuckets(0.0005, 2, 14)
)

func (c Config) histogramOpts(name, help string, buckets []float64) prom.HistogramOpts {
	return prom.HistogramOpts{Namespace: c.namespace(), Subsystem: c.Subsystem, Name: name, Help: help,
		Buckets: buckets, ConstLabels: c.ConstLabels}
}

// New creates the exporter's collectors and registers them on
// cfg.Registerer. It returns an error matching core.ErrInvalid when
// cfg.Registerer is nil, and the registration error (for instance a
// prometheus.AlreadyRegisteredError when another exporter with the same
// names and const labels is registered there) otherwise; on error nothing
// stays registered.
func New(cfg Config) (*Exporter, error) {
	if cfg.Registerer == nil {
		return nil, core.Invalid("prometheus config", "Registerer is nil")
	}
	dispatch := prom.NewCounterVec(cfg.counterOpts("dispatch_total",
		"Delivery outcomes: success (DONE), failure (RETRY scheduled), dead (DEAD)."), []string{"result"})
	depth := prom.NewGaugeVec(cfg.gaugeOpts("queue_depth", "Events waiting in the dispatcher's in-memory queues."),
		[]string{"queue"})
	latency := prom.NewHistogramVec(cfg.histogramOpts("delivery_latency_seconds",
		"Time from an event's commit to the start of its listener call, by the queue it came from "+
			"(hot: from the after-commit hand-off; cold: from the later of created_at and available_at).",
		latencyBuckets), []string{"queue"})
	listener := prom.NewHistogram(cfg.histogramOpts("listener_duration_seconds",
		"Duration of one listener call, interceptors included.", latencyBuckets))
	claim := prom.NewHistogram(cfg.histogramOpts("claim_duration_seconds",
		"Duration of one claim of the poller, with or without rows.", statementBuckets))
	write := prom.NewHistogram(cfg.histogramOpts("writeback_duration_seconds",
		"Duration of one round of outcome write-backs (a DONE batch, a RETRY, a DEAD).", statementBuckets))
	e := &Exporter{
		hotLatency:  latency.WithLabelValues("hot"),
		coldLatency: latency.WithLabelValues("cold"),
		listener:    listener,
		claim:       claim,
		write:       write,
		hotEnqueued: prom.NewCounter(cfg.counterOpts("hot_enqueued_total",
			"Events handed to the hot queue right after their transaction committed.")),
		hotDropped: prom.NewCounter(cfg.counterOpts("hot_dropped_total",
			"Events the full hot queue refused; the poller delivers them later.")),
		coldEnqueued: prom.NewCounter(cfg.counterOpts("cold_enqueued_total",
			"Events the poller claimed and handed to the cold queue.")),
		success: dispatch.WithLabelValues("success"),
		failure: dispatch.WithLabelValues("failure"),
		dead:    dispatch.WithLabelValues("dead"),
		storeErrors: prom.NewCounter(cfg.counterOpts("store_errors_total",
			"Failed store operations: claims, outcome write-backs, lease releases.")),
		hotDepth:  depth.WithLabelValues("hot"),
		coldDepth: depth.WithLabelValues("cold"),
		oldestLag: prom.NewGauge(cfg.gaugeOpts("oldest_lag_seconds",
			"Age (now - created_at) of the event a worker took from a queue most recently.")),
	}
	if err := register(cfg.Registerer, e.hotEnqueued, e.hotDropped, e.coldEnqueued, dispatch, e.storeErrors,
		depth, e.oldestLag, latency, listener, claim, write); err != nil {
		return nil, err
	}
	return e, nil
}

// register registers cs, or none of them.
func register(r prom.Registerer, cs ...prom.Collector) error {
	for i, c := range cs {
		if err := r.Register(c); err != nil {
			for _, done := range cs[:i] {
				r.Unregister(done)
			}
			return fmt.Errorf("register outbox metrics: %w", err)
		}
	}
	return nil
}

// HotEnqueued implements core.Metrics.
func (e *Exporter) HotEnqueued() { e.hotEnqueued.Inc() }

// HotDropped implements core.Metrics.
func (e *Exporter) HotDropped() { e.hotDropped.Inc() }

// ColdEnqueued implements core.Metrics.
func (e *Exporter) ColdEnqueued() { e.coldEnqueued.Inc() }

// DispatchSuccess implements core.Metrics.
func (e *Exporter) DispatchSuccess() { e.success.Inc() }

// DispatchFailure implements core.Metrics.
func (e *Exporter) DispatchFailure() { e.failure.Inc() }

// DispatchDead implements core.Metrics.
func (e *Exporter) DispatchDead() { e.dead.Inc() }

// StoreError implements core.Metrics.
func (e *Exporter) StoreError() { e.storeErrors.Inc() }

// QueueDepths implements core.Metrics.
func (e *Exporter) QueueDepths(hot, cold int) {
	e.hotDepth.Set(float64(hot))
	e.coldDepth.Set(float64(cold))
}

// OldestLag implements core.Metrics.
func (e *Exporter) OldestLag(lag time.Duration) { e.oldestLag.Set(lag.Seconds()) }

// DeliveryLatency implements core.LatencyMetrics.
func (e *Exporter) DeliveryLatency(queue string, d time.Duration) {
	if queue == "hot" {
		e.hotLatency.Observe(d.Seconds())
		return
	}
	e.coldLatency.Observe(d.Seconds())
}

// ListenerDuration implements core.LatencyMetrics.
func (e *Exporter) ListenerDuration(d time.Duration) { e.listener.Observe(d.Seconds()) }

// ClaimDuration implements core.LatencyMetrics.
func (e *Exporter) ClaimDuration(d time.Duration) { e.claim.Observe(d.Seconds()) }

// WriteBackDuration implements core.LatencyMetrics.
func (e *Exporter) WriteBackDuration(d time.Duration) { e.write.Observe(d.Seconds()) }
