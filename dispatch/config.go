package dispatch

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox/core"
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
)

// maxOwnerLen is the size of the locked_by column.
const maxOwnerLen = core.MaxOwnerLen

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

	// Workers is the number of events processed concurrently. Default 4.
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
	// written. Longer lingers mean fewer statements and commits: 5ms gave
	// 2-4% more throughput than 1ms under a full write load on PostgreSQL
	// and MariaDB (docs/BENCHMARKS.md). Default 5ms.
	DoneBatchLinger time.Duration
	// DeleteDelivered deletes each delivered event's row instead of marking
	// it DONE, in the same batches. Store must implement core.DoneDeleter
	// (the SQL stores do); New fails otherwise. No DONE rows are kept, so
	// there are none to purge or count, and an event's delivery leaves no
	// trace in the table; failing events still end DEAD. On SQLite, where
	// the DONE update is a tenth of a writer's transaction, it raised the
	// delivered rate by 5-15%; on PostgreSQL and MariaDB, whose commits cost
	// more than the row work, W1 did not change measurably
	// (docs/BENCHMARKS.md). Default false.
	DeleteDelivered bool

	// NoYieldAfterCommit keeps the committing goroutine running after the
	// writer hook has put its transaction's events on the hot queue. By
	// default the hook then yields the goroutine's processor once
	// (runtime.Gosched), so that an idle worker starts the delivery at once
	// on the OS thread that is already running instead of waiting for the
	// runtime to wake another one, which on a busy machine takes
	// milliseconds: on 2 loaded cores this cut the p99 commit-to-listener
	// latency from 2.4 ms to 0.3 ms, at the same throughput
	// (docs/BENCHMARKS.md). The committing goroutine goes on as soon as a
	// processor is free. Set it when delivery latency matters less than
	// the committing goroutine's.
	NoYieldAfterCommit bool

	// Interceptors run around every delivery: Before in order, After in
	// reverse order. Default: none.
	Interceptors []core.Interceptor
	// Metrics receives counters and gauges. Default: core.NopMetrics{}.
	Metrics core.Metrics
	// Logger receives the dispatcher's logs. Default: the zero (silent)
	// logger; the global logger is never used.
	Logger zerolog.Logger
	// Now returns the current time. Default: time.Now.
	Now func() time.Time
}

func invalid(reason string, args ...any) error {
	return &core.ValidationError{Field: "dispatch config", Reason: fmt.Sprintf(reason, args...)}
}

// withDefaults validates c and returns a copy with defaults applied.
func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Store == nil:
		return c, invalid("Store is nil")
	case c.DB == nil:
		return c, invalid("DB is nil")
	case c.Registry == nil:
		return c, invalid("Registry is nil")
	case len(c.Owner) > maxOwnerLen:
		return c, invalid("Owner is %d bytes, more than %d", len(c.Owner), maxOwnerLen)
	case c.Workers < 0:
		return c, invalid("Workers is negative")
	case c.HotQueueSize < 0:
		return c, invalid("HotQueueSize is negative")
	case c.ColdQueueSize < 0:
		return c, invalid("ColdQueueSize is negative")
	case c.MaxAttempts < 0:
		return c, invalid("MaxAttempts is negative")
	case c.DrainTimeout < 0:
		return c, invalid("DrainTimeout is negative")
	case c.ListenerTimeout < 0:
		return c, invalid("ListenerTimeout is negative")
	case c.StoreTimeout < 0:
		return c, invalid("StoreTimeout is negative")
	case c.DoneBatchSize < 0:
		return c, invalid("DoneBatchSize is negative")
	case c.DoneBatchLinger < 0:
		return c, invalid("DoneBatchLinger is negative")
	}
	if _, ok := core.StoreAs[core.DoneDeleter](c.Store); c.DeleteDelivered && !ok {
		return c, invalid("DeleteDelivered is set but Store %T does not implement core.DoneDeleter", c.Store)
	}
	for i, ic := range c.Interceptors {
		if ic == nil {
			return c, invalid("Interceptors[%d] is nil", i)
		}
	}
	if c.Owner == "" {
		c.Owner = NewOwner()
	}
	c.Workers = orDefault(c.Workers, DefaultWorkers)
	c.HotQueueSize = orDefault(c.HotQueueSize, DefaultHotQueueSize)
	c.ColdQueueSize = orDefault(c.ColdQueueSize, DefaultColdQueueSize)
	c.MaxAttempts = orDefault(c.MaxAttempts, DefaultMaxAttempts)
	c.DrainTimeout = orDefault(c.DrainTimeout, DefaultDrainTimeout)
	c.StoreTimeout = orDefault(c.StoreTimeout, DefaultStoreTimeout)
	c.DoneBatchSize = orDefault(c.DoneBatchSize, DefaultDoneBatchSize)
	c.DoneBatchLinger = orDefault(c.DoneBatchLinger, DefaultDoneBatchLinger)
	if c.Retry == nil {
		c.Retry = &core.ExponentialBackoff{}
	}
	if c.Metrics == nil {
		c.Metrics = core.NopMetrics{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Interceptors = append([]core.Interceptor(nil), c.Interceptors...)
	return c, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

// NewOwner returns a lease owner token unique to this process and call; it
// is core.NewOwner.
func NewOwner() string { return core.NewOwner() }
