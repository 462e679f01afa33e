package poller

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/config"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultBatchSize = 100
	// DefaultMaxBatchSize caps the claims of a poller whose BatchSize is not
	// set, while they grow to follow a backlog: half the dispatcher's default
	// cold queue, so that the workers deliver one claim while the next one
	// runs (claims of up to 1,000 drained PostgreSQL 10-13% slower, see
	// docs/benchmarks.md#w2-drain).
	DefaultMaxBatchSize = 500
	DefaultInterval     = 5 * time.Second
	DefaultClaimTimeout = 30 * time.Second
	DefaultBusyInterval = 50 * time.Millisecond
	DefaultBusyFor      = 10 * time.Second
)

// Handler takes the events the poller claims. *dispatch.Dispatcher
// implements it, and every optional interface below.
type Handler interface {
	// EnqueueCold offers a claimed event without blocking and reports whether
	// the handler holds it now. On false the poller releases the lease.
	EnqueueCold(ev core.Event) bool
	// ColdCapacity returns how many events EnqueueCold would accept now.
	ColdCapacity() int
}

// The poller asks its Handler for more through these optional interfaces,
// found by type assertion in New.

// OwnerSource is a Handler that holds its events under a lease owner token:
// the poller claims with the same token (the default of Config.Owner), since
// the handler's write-backs are fenced by it.
type OwnerSource interface {
	Owner() string
}

// LeaseTimeoutSource is a Handler that renews the leases of the events it
// holds, and so owns the lease timeout: the poller claims with it (the
// default of Config.LeaseTimeout) and rejects a different one.
type LeaseTimeoutSource interface {
	LeaseTimeout() time.Duration
}

// DueFromNotifier is a Handler that leaves events in the database to become
// deliverable later (retries; events it released unsent) and reports when,
// and from which creation time on (zero: not known). New registers the
// poller's WakeAtFrom with it, so that such events are claimed when they
// fall due, from there rather than from the oldest row. fn must not block.
type DueFromNotifier interface {
	NotifyDueFrom(fn func(due, from time.Time))
}

// DueNotifier is DueFromNotifier without the creation time: New registers
// the poller's WakeAt with a Handler that is a DueNotifier and not a
// DueFromNotifier.
type DueNotifier interface {
	NotifyDue(fn func(due time.Time))
}

// Config configures a Poller. The zero value of every optional field means
// the default stated in its comment; New validates the rest.
type Config struct {
	// Store claims the events. Required.
	Store core.Store
	// DB is the pool the claims run on: a *sql.DB (or *sqlx.DB), not a
	// transaction, since some stores begin their own transaction to claim.
	// Required.
	DB core.DBTX
	// Handler receives the claimed events. Required. If it is an
	// OwnerSource, its Owner is the default Owner; if it is a
	// LeaseTimeoutSource, its LeaseTimeout is the LeaseTimeout; if it is a
	// DueFromNotifier (or a DueNotifier), New subscribes WakeAtFrom (or
	// WakeAt) to it so that retries are claimed when they fall due.
	// *dispatch.Dispatcher is all of these.
	Handler Handler

	// Owner is the lease owner token the claims use. It must equal the
	// dispatcher's, d.Owner(), which is the default when Handler is a
	// dispatcher; otherwise the default is unique per process. At most 128
	// bytes.
	Owner string
	// LeaseTimeout is how long a claim holds an event before another claimer
	// may take it. The dispatcher owns the setting
	// (dispatch.Config.LeaseTimeout), since it renews the leases of the
	// events it holds: when Handler is a LeaseTimeoutSource (as
	// *dispatch.Dispatcher is), its LeaseTimeout is the default, and a
	// different value here is rejected, since a poller whose lease is
	// shorter than the one renewals keep would reclaim held events, and a
	// longer one would delay crash recovery the dispatcher does not expect.
	// Otherwise the default is core.DefaultLeaseTimeout, 30 seconds.
	LeaseTimeout time.Duration
	// SkipRecent leaves events created less than this long ago to the hot
	// path. Default 0: claim everything due.
	SkipRecent time.Duration
	// BatchSize is how many events a claim asks for when there is no
	// backlog. A claim costs about the same for 50 rows as for 500 (its
	// round trips and commit dominate), so larger batches drain a backlog
	// faster (docs/benchmarks.md#w2-drain); the poller therefore doubles the size of
	// each claim after one that came back full, up to MaxBatchSize, and
	// returns to BatchSize after one that came back short. A claim never
	// asks for more than the handler has room for. Default 100.
	BatchSize int
	// MaxBatchSize caps the claims that grow while a backlog drains.
	// Default DefaultMaxBatchSize (500) when BatchSize is not set, else
	// BatchSize: a poller configured with a BatchSize alone claims that
	// many, fixed, as before claims grew. It must not be below BatchSize.
	MaxBatchSize int
	// Interval is the time between polls when there is no backlog, and the
	// cap of the back-off after a failed claim. Default 5s.
	Interval time.Duration

	// BusyInterval is the time between polls while the outbox is busy: for
	// BusyFor after a poll that handed events over. It is how long, at
	// most, an event written by another instance, or without a hot path,
	// waits when the store has no wake source (MySQL/MariaDB, SQLite) or
	// its watch connection is down. Setting it to Interval turns the
	// adaptive poll off. Default 50ms (or Interval, if shorter).
	BusyInterval time.Duration
	// BusyFor is how long polls run every BusyInterval after the last poll
	// that handed events over; then they return to Interval. An idle outbox
	// therefore costs one claim per Interval. Default 10s.
	BusyFor time.Duration
	// NoWatch stops the poller from watching for new events. By default,
	// when Store is a core.WakeSource (PostgreSQL: LISTEN), the poller holds
	// one dedicated connection of DB subscribed to the table's signals and
	// polls as soon as any instance commits events that no hot path
	// delivers (core.Writer sends the signal); polling at Interval stays
	// the safety net. The connection is opened again after a failure.
	NoWatch bool

	// ClaimTimeout bounds each claim statement, so that a connection the
	// network stopped carrying (no error, no answer) cannot stall the poller
	// and with it retries, overflow and crash recovery. Default 30s.
	ClaimTimeout time.Duration

	// Metrics counts store errors (StoreError) and undecodable rows marked
	// DEAD (DispatchDead). Default: core.NopMetrics{}.
	Metrics core.Metrics
	// Logger receives the poller's logs. Nil: outboxlog.Default(), which sends
	// warnings and errors to slog.Default(). slog.New(slog.DiscardHandler)
	// silences it; a zerolog.Logger zl is wired in with
	// slog.New(zerolog.NewSlogHandler(zl)).
	Logger *slog.Logger
	// Now returns the current time. Default: time.Now.
	Now func() time.Time
}

// validate reports the first field of c that New cannot accept.
func (c Config) validate() error {
	v := config.Validator{Component: "poller config"}
	v.Require("Store", c.Store != nil)
	v.Require("DB", c.DB != nil)
	v.Require("Handler", c.Handler != nil)
	config.Owner(&v, c.Owner)
	config.NonNegative(&v, "LeaseTimeout", c.LeaseTimeout)
	config.NonNegative(&v, "SkipRecent", c.SkipRecent)
	config.NonNegative(&v, "BatchSize", c.BatchSize)
	config.NonNegative(&v, "MaxBatchSize", c.MaxBatchSize)
	if c.MaxBatchSize > 0 {
		v.Check(c.MaxBatchSize >= cmp.Or(c.BatchSize, DefaultBatchSize),
			"MaxBatchSize %d is below BatchSize %d", c.MaxBatchSize, cmp.Or(c.BatchSize, DefaultBatchSize))
	}
	config.NonNegative(&v, "Interval", c.Interval)
	config.NonNegative(&v, "ClaimTimeout", c.ClaimTimeout)
	if h, ok := c.Handler.(LeaseTimeoutSource); ok && c.LeaseTimeout > 0 {
		v.Check(c.LeaseTimeout == h.LeaseTimeout(),
			"LeaseTimeout %s differs from the handler's lease timeout %s; set it on the dispatcher (dispatch.Config.LeaseTimeout) and leave it zero here",
			c.LeaseTimeout, h.LeaseTimeout())
	}
	config.NonNegative(&v, "BusyInterval", c.BusyInterval)
	config.NonNegative(&v, "BusyFor", c.BusyFor)
	return v.Err()
}

// withDefaults validates c and returns a copy with defaults applied.
func (c Config) withDefaults() (Config, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	if c.Owner == "" {
		if o, ok := c.Handler.(OwnerSource); ok {
			c.Owner = o.Owner()
		}
	}
	if c.Owner == "" {
		c.Owner = core.NewOwner()
	}
	if h, ok := c.Handler.(LeaseTimeoutSource); ok && c.LeaseTimeout == 0 {
		c.LeaseTimeout = h.LeaseTimeout()
	}
	c.LeaseTimeout = cmp.Or(c.LeaseTimeout, core.DefaultLeaseTimeout)
	switch {
	case c.MaxBatchSize == 0 && c.BatchSize == 0:
		c.MaxBatchSize = DefaultMaxBatchSize
	case c.MaxBatchSize == 0:
		c.MaxBatchSize = c.BatchSize
	}
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.ClaimTimeout = cmp.Or(c.ClaimTimeout, DefaultClaimTimeout)
	c.BusyInterval = min(cmp.Or(c.BusyInterval, DefaultBusyInterval), c.Interval)
	c.BusyFor = cmp.Or(c.BusyFor, DefaultBusyFor)
	c.Metrics = cmp.Or[core.Metrics](c.Metrics, core.NopMetrics{})
	c.Now = config.Clock(c.Now)
	return c, nil
}
