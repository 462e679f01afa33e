package poller

import (
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox/core"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultLeaseTimeout = 5 * time.Minute
	DefaultBatchSize    = 100
	DefaultInterval     = 5 * time.Second
	DefaultClaimTimeout = 30 * time.Second
)

// maxOwnerLen is the size of the locked_by column.
const maxOwnerLen = 128

// Handler takes the events the poller claims. *dispatch.Dispatcher
// implements it.
type Handler interface {
	// EnqueueCold offers a claimed event without blocking and reports whether
	// the handler holds it now. On false the poller releases the lease.
	EnqueueCold(ev core.Event) bool
	// ColdCapacity returns how many events EnqueueCold would accept now.
	ColdCapacity() int
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
	// Handler receives the claimed events. Required. If it also has an
	// Owner() string method, that is the default Owner; if it has a
	// NotifyDue(func(time.Time)) method (as *dispatch.Dispatcher does), New
	// subscribes WakeAt to it so that retries are claimed when they fall due.
	Handler Handler

	// Owner is the lease owner token the claims use. It must equal the
	// dispatcher's, d.Owner(), which is the default when Handler is a
	// dispatcher; otherwise the default is unique per process. At most 128
	// bytes.
	Owner string
	// LeaseTimeout is how long a claim holds an event before another claimer
	// may take it. It must exceed the time an event can wait in the queue
	// plus its delivery. Default 5 minutes.
	LeaseTimeout time.Duration
	// SkipRecent leaves events created less than this long ago to the hot
	// path. Default 0: claim everything due.
	SkipRecent time.Duration
	// BatchSize caps the events one claim takes. A claim costs about the
	// same for 50 rows as for 100 (its round trips and commit dominate), so
	// a backlog drains about as many batches per second whatever their
	// size: 100 drained 1.3-1.6 times as fast as 50 on MariaDB and
	// PostgreSQL (docs/BENCHMARKS.md). Default 100.
	BatchSize int
	// Interval is the time between polls when there is no backlog, and the
	// cap of the back-off after a failed claim. Default 5s.
	Interval time.Duration

	// ClaimTimeout bounds each claim statement, so that a connection the
	// network stopped carrying (no error, no answer) cannot stall the poller
	// and with it retries, overflow and crash recovery. Default 30s.
	ClaimTimeout time.Duration

	// Metrics counts store errors (StoreError) and undecodable rows marked
	// DEAD (DispatchDead). Default: core.NopMetrics{}.
	Metrics core.Metrics
	// Logger receives the poller's logs. Default: the zero (silent) logger.
	Logger zerolog.Logger
	// Now returns the current time. Default: time.Now.
	Now func() time.Time
}

func invalid(reason string, args ...any) error {
	return &core.ValidationError{Field: "poller config", Reason: fmt.Sprintf(reason, args...)}
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Store == nil:
		return c, invalid("Store is nil")
	case c.DB == nil:
		return c, invalid("DB is nil")
	case c.Handler == nil:
		return c, invalid("Handler is nil")
	case len(c.Owner) > maxOwnerLen:
		return c, invalid("Owner is %d bytes, more than %d", len(c.Owner), maxOwnerLen)
	case c.LeaseTimeout < 0:
		return c, invalid("LeaseTimeout is negative")
	case c.SkipRecent < 0:
		return c, invalid("SkipRecent is negative")
	case c.BatchSize < 0:
		return c, invalid("BatchSize is negative")
	case c.Interval < 0:
		return c, invalid("Interval is negative")
	case c.ClaimTimeout < 0:
		return c, invalid("ClaimTimeout is negative")
	}
	if c.Owner == "" {
		if o, ok := c.Handler.(interface{ Owner() string }); ok {
			c.Owner = o.Owner()
		}
	}
	if c.Owner == "" {
		c.Owner = core.NewOwner()
	}
	if c.LeaseTimeout == 0 {
		c.LeaseTimeout = DefaultLeaseTimeout
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.ClaimTimeout == 0 {
		c.ClaimTimeout = DefaultClaimTimeout
	}
	if c.Metrics == nil {
		c.Metrics = core.NopMetrics{}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}
