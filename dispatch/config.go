package dispatch

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/config"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultWorkers       = 4
	DefaultHotQueueSize  = 1000
	DefaultColdQueueSize = 1000
	DefaultMaxAttempts   = 10
	DefaultDrainTimeout  = 5 * time.Second
	DefaultStoreTimeout  = 10 * time.Second
	// DefaultDoneBatchSize and DefaultDoneBatchLinger shape the batches in
	// which DONE outcomes are written when the store implements
	// core.BatchMarker.
	DefaultDoneBatchSize   = 500
	DefaultDoneBatchLinger = 5 * time.Millisecond
	// DefaultLeaseTimeout is core.DefaultLeaseTimeout: 30 seconds.
	DefaultLeaseTimeout = core.DefaultLeaseTimeout
)

// Config configures a Dispatcher. The zero value of every optional field means
// the default stated in its comment; New validates the rest.
type Config struct {
	// Store records outcomes and releases leases. Required.
	Store core.Store
	// DB is the pool (*sql.DB, *sqlx.DB) outcome write-backs and lease
	// releases run on. Required.
	DB core.DBTX
	// Registry routes each event to its listener. Required.
	Registry *core.Registry

	// Owner is the lease owner token of this process: the Writer inserts
	// hot-path events leased by it (see WriterHook) and the Poller must claim
	// with the same token (poller.Config.Owner, which defaults to it).
	// At most 128 bytes. Default: unique per process, hostname-pid-random.
	Owner string

	// LeaseTimeout is how long a lease holds an event before another
	// claimer may take it: the one lease duration of the dispatcher and of
	// the poller feeding it, which takes it from here (poller.New, and
	// outbox.New, reject a poller setting that differs). When Store
	// implements core.LeaseRenewer (the SQL stores do), the dispatcher
	// renews the lease of every event it holds every LeaseTimeout/3, so
	// that a listener slower than the lease causes no second delivery, and
	// the lease only decides how soon the events of a crashed instance are
	// claimed again. Without the capability there is no renewal, and a
	// delivery that outlives its lease may be delivered again elsewhere.
	// Default 30s (core.DefaultLeaseTimeout, which says why).
	LeaseTimeout time.Duration
	// Workers is the number of events processed concurrently: the
	// listener calls in flight at once. Default 4, or, when a registered
	// listener declares itself asynchronous (core.AsyncListener: the
	// broker publishers, which wait on the broker's acknowledgement), the
	// largest InFlight among them (the publishers ask for 256), chosen at
	// Start from the listeners registered by then (Dispatcher.Workers
	// says which). For such a listener that also takes batches
	// (core.BatchListener: the JetStream and Kafka publishers), each
	// worker carries a batch, and an eighth of its InFlight is asked for
	// (32 of 256), or as many as full batches need to carry InFlight
	// events if that is more; with Interceptors set, which wrap one event
	// each, there are no batches and InFlight counts whole. However many workers there are,
	// at most 32 write an outcome at once (each on a connection of DB);
	// DONE outcomes in batches take none of these.
	Workers int
	// HotQueueSize bounds the queue fed after commit. Default 1000.
	HotQueueSize int
	// ColdQueueSize bounds the queue fed by the poller. Default 1000.
	ColdQueueSize int
	// MaxAttempts is the number of failed deliveries after which an event
	// goes DEAD; the MaxAttempts-th failure marks it DEAD. Default 10.
	MaxAttempts int
	// Retry computes the delay before the next attempt after a failure.
	// Default: &core.ExponentialBackoff{} (200ms base, 60s max, jitter
	// factor in [0.5, 1.5)).
	Retry core.RetryPolicy
	// DrainTimeout bounds how long Close lets the workers empty the queues
	// before it cancels the listeners still running. Default 5s.
	DrainTimeout time.Duration
	// ListenerTimeout bounds each delivery through the listener's context.
	// Default 0: no timeout.
	ListenerTimeout time.Duration
	// StoreTimeout bounds each outcome write-back and lease release; they
	// run on a context that shutdown does not cancel. Default 10s.
	StoreTimeout time.Duration

	// DoneBatchSize caps how many DONE outcomes one statement records when
	// Store implements core.BatchMarker (the SQL stores do): successful
	// deliveries are collected and written together, so that marking events
	// done costs one statement per batch instead of one commit per event.
	// Batches are small under light load (what arrives within the linger)
	// and grow to this cap only while the database is slower than the
	// deliveries, so that it catches up in a few statements. 1 writes each
	// outcome on its own, as for stores without the capability. Default 500.
	DoneBatchSize int
	// DoneBatchLinger is how long a batch of DONE outcomes waits for more
	// before it is written, counted from its first outcome; a full batch is
	// written at once. It delays only the DONE write, never a delivery; an
	// event stays in flight (its id is not accepted again) until its DONE is
	// written. Longer lingers mean fewer, larger statements and commits
	// under a full write load, at the cost of holding each event in flight
	// a little longer; docs/design/dispatcher.md#alternatives-measured has the measurements behind the
	// default. An ordered event's DONE (core.OrderedStore) does not
	// linger: its key's next delivery waits for it, so a batch that holds
	// one is written at once with what has arrived. Default 5ms.
	DoneBatchLinger time.Duration
	// DeleteDelivered deletes each delivered event's row instead of marking
	// it DONE, in the same batches. Store must implement core.DoneDeleter
	// (the SQL stores do); New fails otherwise. No DONE rows are kept, so
	// there are none to purge or count, and an event's delivery leaves no
	// trace in the table; failing events still end DEAD. It pays where the
	// row work of the DONE update is a large share of a transaction (SQLite)
	// and matters little where commits dominate (PostgreSQL, MariaDB); see
	// docs/benchmarks.md#deletedelivered. Default false.
	DeleteDelivered bool

	// NoYieldAfterCommit keeps the committing goroutine running after the
	// writer hook has put its transaction's events on the hot queue. By
	// default the hook then yields the goroutine's processor once
	// (runtime.Gosched), so that an idle worker starts the delivery at once
	// on the OS thread that is already running instead of waiting for the
	// runtime to wake another one, which on a busy machine takes
	// milliseconds and dominates the tail of the commit-to-listener latency
	// (docs/design/dispatcher.md#the-yield-after-commit). The committing goroutine goes on as soon as a
	// processor is free. Set it when delivery latency matters less than
	// the committing goroutine's.
	NoYieldAfterCommit bool

	// Interceptors run around every delivery: Before in order, After in
	// reverse order. Default: none.
	Interceptors []core.Interceptor
	// Metrics receives counters and gauges. Default: core.NopMetrics{}.
	Metrics core.Metrics
	// Logger receives the dispatcher's logs. Nil: outboxlog.Default(), which sends
	// warnings and errors to slog.Default(). slog.New(slog.DiscardHandler)
	// silences it; a zerolog.Logger zl is wired in with
	// slog.New(zerolog.NewSlogHandler(zl)).
	Logger *slog.Logger
	// Now returns the current time. Default: time.Now.
	Now func() time.Time
}

// validate reports the first field of c that New cannot accept.
func (c Config) validate() error {
	v := config.Validator{Component: "dispatch config"}
	v.Require("Store", c.Store != nil)
	v.Require("DB", c.DB != nil)
	v.Require("Registry", c.Registry != nil)
	config.Owner(&v, c.Owner)
	config.NonNegative(&v, "Workers", c.Workers)
	config.NonNegative(&v, "HotQueueSize", c.HotQueueSize)
	config.NonNegative(&v, "ColdQueueSize", c.ColdQueueSize)
	config.NonNegative(&v, "MaxAttempts", c.MaxAttempts)
	config.NonNegative(&v, "DrainTimeout", c.DrainTimeout)
	config.NonNegative(&v, "ListenerTimeout", c.ListenerTimeout)
	config.NonNegative(&v, "LeaseTimeout", c.LeaseTimeout)
	config.NonNegative(&v, "StoreTimeout", c.StoreTimeout)
	config.NonNegative(&v, "DoneBatchSize", c.DoneBatchSize)
	config.NonNegative(&v, "DoneBatchLinger", c.DoneBatchLinger)
	if c.DeleteDelivered {
		_, ok := core.StoreAs[core.DoneDeleter](c.Store)
		v.Check(ok, "DeleteDelivered is set but Store %T does not implement core.DoneDeleter", c.Store)
	}
	for i, ic := range c.Interceptors {
		v.Check(ic != nil, "Interceptors[%d] is nil", i)
	}
	return v.Err()
}

// withDefaults validates c and returns a copy with defaults applied.
func (c Config) withDefaults() (Config, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	if c.Owner == "" {
		c.Owner = core.NewOwner()
	}
	c.Workers = cmp.Or(c.Workers, DefaultWorkers)
	c.HotQueueSize = cmp.Or(c.HotQueueSize, DefaultHotQueueSize)
	c.ColdQueueSize = cmp.Or(c.ColdQueueSize, DefaultColdQueueSize)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	c.StoreTimeout = cmp.Or(c.StoreTimeout, DefaultStoreTimeout)
	c.LeaseTimeout = cmp.Or(c.LeaseTimeout, DefaultLeaseTimeout)
	c.DoneBatchSize = cmp.Or(c.DoneBatchSize, DefaultDoneBatchSize)
	c.DoneBatchLinger = cmp.Or(c.DoneBatchLinger, DefaultDoneBatchLinger)
	c.Retry = cmp.Or[core.RetryPolicy](c.Retry, &core.ExponentialBackoff{})
	c.Metrics = cmp.Or[core.Metrics](c.Metrics, core.NopMetrics{})
	c.Now = config.Clock(c.Now)
	c.Interceptors = append([]core.Interceptor(nil), c.Interceptors...)
	return c, nil
}
