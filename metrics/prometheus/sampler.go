package prometheus

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/lifecycle"
	"github.com/outboxkit/outbox/outboxlog"
)

// Defaults applied by NewSampler to zero SamplerConfig fields.
const (
	DefaultSampleInterval     = 30 * time.Second
	DefaultSampleQueryTimeout = 10 * time.Second
)

// SamplerConfig configures a Sampler. The zero value of every optional field
// means the default stated in its comment; NewSampler validates the rest.
type SamplerConfig struct {
	// Metrics says where the gauges are registered and how they are named;
	// its Registerer is required. Use the same Namespace and ConstLabels as
	// the outbox's Exporter.
	Metrics Config
	// Store counts the rows: every SQL store of this module implements
	// core.Inspector. Required.
	Store core.Inspector
	// DB is the pool the count queries run on. Required.
	DB core.DBTX
	// Interval is the time between two samples. Default 30 s.
	Interval time.Duration
	// QueryTimeout bounds one sample (a few short queries). Default 10 s.
	QueryTimeout time.Duration
	// Logger receives failed background samples at warn level. Nil:
	// outboxlog.Default(), which sends warnings and errors to slog.Default().
	// slog.New(slog.DiscardHandler) silences it; a zerolog.Logger zl is wired in
	// with slog.New(zerolog.NewSlogHandler(zl)).
	Logger *slog.Logger
	// Now returns the current time, for the oldest pending age. Default:
	// time.Now.
	Now func() time.Time
}

// validate reports the first field of c that NewSampler cannot accept.
func (c SamplerConfig) validate() error {
	v := config.Validator{Component: "sampler config"}
	v.Require("Metrics.Registerer", c.Metrics.Registerer != nil)
	v.Require("Store", c.Store != nil)
	v.Require("DB", c.DB != nil)
	config.NonNegative(&v, "Interval", c.Interval)
	config.NonNegative(&v, "QueryTimeout", c.QueryTimeout)
	return v.Err()
}

// withDefaults validates c and returns a copy with defaults applied.
func (c SamplerConfig) withDefaults() (SamplerConfig, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	c.Interval = cmp.Or(c.Interval, DefaultSampleInterval)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, DefaultSampleQueryTimeout)
	c.Now = config.Clock(c.Now)
	return c, nil
}

// Sampler counts NEW, RETRY and DEAD rows and the age of the oldest pending
// row on an interval, and exposes them as gauges. Each sample runs a few
// short read-only queries that the stores' indexes serve (Store.Stats). Its
// lifecycle is NewSampler, Start, Close; SampleOnce samples without Start.
// It is safe for concurrent use.
type Sampler struct {
	cfg  SamplerConfig
	log  *slog.Logger
	loop lifecycle.Loop

	pending, retrying, dead, oldestAge, lastSample prom.Gauge
	waiting, blockedKeys                           prom.Gauge
	stream, positionLag, oldestStreamAge           prom.Gauge
	errors                                         prom.Counter

	afterSample func(error) // set by tests
}

// NewSampler validates cfg, creates the gauges and registers them on
// cfg.Metrics.Registerer. Bad configuration returns an error matching
// core.ErrInvalid; a failed registration returns the registry's error and
// leaves nothing registered.
func NewSampler(cfg SamplerConfig) (*Sampler, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m := cfg.Metrics
	s := &Sampler{
		cfg:       cfg,
		log:       outboxlog.Or(cfg.Logger).With("component", "outbox.sampler"),
		pending:   prom.NewGauge(m.gaugeOpts("pending_events", "NEW rows in the outbox table, as last sampled.")),
		retrying:  prom.NewGauge(m.gaugeOpts("retrying_events", "RETRY rows in the outbox table, as last sampled.")),
		dead:      prom.NewGauge(m.gaugeOpts("dead_events", "DEAD rows in the outbox table, as last sampled.")),
		oldestAge: prom.NewGauge(m.gaugeOpts("oldest_pending_age_seconds", "Age of the oldest NEW or RETRY row (0 when there is none), as last sampled.")),
		lastSample: prom.NewGauge(m.gaugeOpts("last_sample_timestamp_seconds",
			"Unix time of the last successful sample of the outbox table.")),
		errors: prom.NewCounter(m.counterOpts("sample_errors_total", "Failed samples of the outbox table.")),
		waiting: prom.NewGauge(m.gaugeOpts("waiting_events",
			"Ordered events waiting for an earlier event of their key, as last sampled.")),
		blockedKeys: prom.NewGauge(m.gaugeOpts("blocked_keys",
			"Keys of ordered aggregate types held up by a DEAD head event, as last sampled.")),
		stream: prom.NewGauge(m.gaugeOpts("stream_events",
			"Position delivery: STREAM rows above the persisted floor, as last sampled.")),
		positionLag: prom.NewGauge(m.gaugeOpts("position_lag",
			"Position delivery: the largest position minus the persisted floor, as last sampled.")),
		oldestStreamAge: prom.NewGauge(m.gaugeOpts("oldest_stream_age_seconds",
			"Position delivery: age of the oldest STREAM row above the persisted floor (0 when there is none), as last sampled.")),
	}
	if err := register(m.Registerer, s.pending, s.retrying, s.dead, s.oldestAge, s.lastSample, s.errors, s.waiting, s.blockedKeys,
		s.stream, s.positionLag, s.oldestStreamAge); err != nil {
		return nil, err
	}
	return s, nil
}

// SampleOnce runs one sample and updates the gauges. On failure the gauges
// keep their previous values, sample_errors_total is incremented and the
// error is returned. After Close it returns core.ErrClosed.
func (s *Sampler) SampleOnce(ctx context.Context) error {
	if s.loop.Closed() {
		return core.ErrClosed
	}
	return s.sample(ctx)
}

func (s *Sampler) sample(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	st, err := s.cfg.Store.Stats(ctx, s.cfg.DB)
	if err != nil {
		s.errors.Inc()
		return fmt.Errorf("sample outbox table: %w", err)
	}
	now := s.cfg.Now()
	age := 0.0
	if !st.OldestPending.IsZero() {
		age = max(now.Sub(st.OldestPending).Seconds(), 0)
	}
	s.pending.Set(float64(st.New))
	s.retrying.Set(float64(st.Retry))
	s.dead.Set(float64(st.Dead))
	s.waiting.Set(float64(st.Waiting))
	s.blockedKeys.Set(float64(st.BlockedKeys))
	s.stream.Set(float64(st.Stream))
	s.positionLag.Set(float64(st.PositionLag))
	streamAge := 0.0
	if !st.OldestStream.IsZero() {
		streamAge = max(now.Sub(st.OldestStream).Seconds(), 0)
	}
	s.oldestStreamAge.Set(streamAge)
	s.oldestAge.Set(age)
	s.lastSample.Set(float64(now.UnixNano()) / 1e9)
	return nil
}

// Start launches the sampling loop and returns at once; the first sample is
// taken immediately. Failed samples are logged and counted, never returned.
// It returns core.ErrAlreadyStarted if the sampler was started before and
// core.ErrClosed after Close. Cancelling ctx stops the loop as Close does.
func (s *Sampler) Start(ctx context.Context) error {
	return s.loop.Start(ctx, s.run)
}

// Close stops the sampler and returns when its goroutine has exited; a
// sample in progress finishes, or is cancelled if ctx is done first. It is
// idempotent, safe to call concurrently, and always returns nil. The gauges
// stay registered with their last values.
func (s *Sampler) Close(ctx context.Context) error { return s.loop.Close(ctx) }

func (s *Sampler) run(ctx context.Context, stop <-chan struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-stop:
			return
		case <-timer.C:
		}
		err := s.sample(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "outbox sample failed", outboxlog.Err(err))
		}
		if s.afterSample != nil {
			s.afterSample(err)
		}
		timer.Reset(s.cfg.Interval)
	}
}
