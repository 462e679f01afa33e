package purge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/lifecycle"
	"github.com/outboxkit/outbox/outboxlog"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultRetention    = 7 * 24 * time.Hour
	DefaultBatchSize    = 500
	DefaultInterval     = time.Hour
	DefaultQueryTimeout = 30 * time.Second
)

// LockName is the name of the purge's lock (see Config.Locker).
const LockName = "purge"

// ErrLocked is returned by RunOnce when another instance's purge holds the
// lock (see Config.Locker): the run was skipped and deleted nothing.
var ErrLocked = errors.New("outbox purge: another instance is purging")

// jitterFraction spreads the runs of several instances: each wait is the
// interval plus or minus this fraction of it.
const jitterFraction = 10

// Config configures a Purger. The zero value of every optional field means
// the default stated in its comment; New validates the rest.
type Config struct {
	// Store deletes the rows; every store implements core.Purger. Required.
	Store core.Purger
	// DB is the pool (*sql.DB, *sqlx.DB) each batch runs on as its own
	// statement. Required.
	DB core.DBTX

	// Retention is how long DONE rows are kept after delivery. Default 7 days.
	Retention time.Duration
	// DeadRetention is how long DEAD rows are kept after they died. Default:
	// Retention. It must be zero when KeepDead is set.
	DeadRetention time.Duration
	// KeepDead keeps DEAD rows forever: only DONE rows are purged. Use it when
	// dead events must wait for an operator however long that takes.
	KeepDead bool

	// BatchSize caps the rows one statement deletes. Smaller batches hold
	// locks for less time. Default 500.
	BatchSize int
	// Interval is the time between two background runs; each wait is
	// jittered by ±10% so that instances started together drift apart.
	// Default 1 hour.
	Interval time.Duration
	// QueryTimeout bounds each batch statement. Default 30 s.
	QueryTimeout time.Duration

	// Locker, when set, makes the purge run on one instance at a time: each
	// run first takes the lock LockName of the table (core.Locker) on a
	// dedicated connection of DB, which must then be a pool that hands out
	// connections (*sql.DB, *sqlx.DB), holds it until its last batch, and
	// is skipped when another instance holds it. Find a store's locker with
	// core.StoreAs[core.Locker](store); outbox.New does so in MultiNode and
	// WriterOnly modes. Default nil: every run purges, which is safe too
	// (concurrent deletes remove each row once) but makes instances contend
	// for the same rows.
	Locker core.Locker

	// Logger receives a line at info level for each run that deleted rows, and the
	// errors of background runs. Nil: outboxlog.Default(), which sends warnings
	// and errors to slog.Default(). slog.New(slog.DiscardHandler) silences it; a
	// zerolog.Logger zl is wired in with slog.New(zerolog.NewSlogHandler(zl)).
	Logger *slog.Logger
	// Now returns the current time, from which the cutoffs are computed.
	// Default: time.Now.
	Now func() time.Time
}

// validate reports the first field of c that New cannot accept.
func (c Config) validate() error {
	v := config.Validator{Component: "purge config"}
	v.Require("Store", c.Store != nil)
	v.Require("DB", c.DB != nil)
	config.NonNegative(&v, "Retention", c.Retention)
	v.Check(c.DeadRetention >= 0, "DeadRetention is negative (set KeepDead to keep DEAD rows)")
	v.Check(!c.KeepDead || c.DeadRetention == 0, "KeepDead and DeadRetention are both set")
	config.NonNegative(&v, "BatchSize", c.BatchSize)
	config.NonNegative(&v, "Interval", c.Interval)
	config.NonNegative(&v, "QueryTimeout", c.QueryTimeout)
	if c.Locker != nil && c.DB != nil {
		_, conner := c.DB.(core.Conner)
		v.Check(conner, "Locker is set but DB (%T) hands out no dedicated connection (it needs a Conn method, as *sql.DB has)", c.DB)
	}
	return v.Err()
}

// withDefaults validates c and returns a copy with defaults applied.
func (c Config) withDefaults() (Config, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	if !c.KeepDead {
		c.DeadRetention = cmp.Or(c.DeadRetention, c.Retention)
	}
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	c.QueryTimeout = cmp.Or(c.QueryTimeout, DefaultQueryTimeout)
	c.Now = config.Clock(c.Now)
	return c, nil
}

// Purger deletes old DONE and DEAD rows, in the background between Start and
// Close or once per RunOnce call. It is safe for concurrent use; a Purger
// cannot be restarted after Close.
type Purger struct {
	cfg Config
	log *slog.Logger

	loop lifecycle.Loop

	// afterRun, when set (by tests), is called by the loop after every run.
	afterRun func(deleted int64, err error)
}

// New validates cfg and returns a Purger. Bad configuration returns an error
// matching core.ErrInvalid.
func New(cfg Config) (*Purger, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Purger{
		cfg: cfg,
		log: outboxlog.Or(cfg.Logger).With("component", "outbox.purge"),
	}, nil
}

// Start launches the background loop and returns at once: a first run
// starts immediately, then one every Config.Interval (jittered). Errors of
// background runs are logged, never returned; the next run retries. Start
// returns core.ErrAlreadyStarted if the purger was started before and
// core.ErrClosed after Close. Cancelling ctx stops the loop as Close does.
func (p *Purger) Start(ctx context.Context) error {
	return p.loop.Start(ctx, p.background)
}

// Close stops the purger: no run or batch starts after it is called, and a
// batch in progress finishes unless ctx is done first, which cancels it. An
// interrupted run loses nothing; the rows it did not reach wait for the next
// run. Close returns when the background goroutine has exited. It is
// idempotent, safe to call concurrently, and always returns nil.
func (p *Purger) Close(ctx context.Context) error { return p.loop.Close(ctx) }

// RunOnce runs one purge on the caller's goroutine, whether or not the
// background loop runs: it deletes DONE rows older than Config.Retention and
// (unless Config.KeepDead) DEAD rows older than Config.DeadRetention, batch
// after batch until a batch deletes fewer than Config.BatchSize rows. It
// returns how many rows it deleted. On a failed batch it stops and returns
// the rows deleted so far with the error. With Config.Locker, it returns
// ErrLocked when another instance is purging. After Close it returns
// core.ErrClosed.
func (p *Purger) RunOnce(ctx context.Context) (int64, error) {
	if p.loop.Closed() {
		return 0, core.ErrClosed
	}
	return p.run(ctx, nil)
}

func (p *Purger) background(ctx context.Context, stop <-chan struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-stop:
			return
		case <-timer.C:
		}
		n, err := p.run(ctx, stop)
		if errors.Is(err, ErrLocked) {
			// Another instance runs this purge; ours waits for the next
			// interval, jittered, so the instances keep taking turns.
			p.log.LogAttrs(ctx, slog.LevelDebug, "outbox purge skipped: another instance holds the purge lock")
			err = nil
		}
		if err != nil && !stopping(ctx, stop) {
			p.log.LogAttrs(ctx, slog.LevelError, "outbox purge failed; retrying at the next run",
				outboxlog.Err(err), slog.Int64("deleted", n))
		}
		if p.afterRun != nil {
			p.afterRun(n, err)
		}
		timer.Reset(p.nextWait())
	}
}

// stopping reports whether an error is just the shutdown interrupting a run.
func stopping(ctx context.Context, stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return ctx.Err() != nil
	}
}

func (p *Purger) nextWait() time.Duration {
	j := p.cfg.Interval / jitterFraction
	return p.cfg.Interval - j + rand.N(2*j+1)
}

// run takes the purge lock when there is one, and purges.
func (p *Purger) run(ctx context.Context, stop <-chan struct{}) (int64, error) {
	if p.cfg.Locker == nil {
		return p.purge(ctx, stop)
	}
	lock, ok, err := p.cfg.Locker.TryLock(ctx, p.cfg.DB.(core.Conner), LockName)
	if err != nil {
		return 0, fmt.Errorf("purge: %w", err)
	}
	if !ok {
		return 0, ErrLocked
	}
	// The lock is held for the whole run, so that a second instance never
	// starts while this one still has batches to go. Unlock runs even when
	// ctx is done (it detaches from it itself). Losing the lock during the
	// run (its session dropped) is harmless: a second purger deletes other
	// rows or the same ones once.
	n, err := p.purge(ctx, stop)
	if uerr := lock.Unlock(ctx); uerr != nil {
		p.log.LogAttrs(ctx, slog.LevelWarn, "outbox purge: releasing the purge lock failed; its session was closed instead",
			outboxlog.Err(uerr))
	}
	return n, err
}

// KeyPurger is implemented by stores with ordered delivery (core.Ordering):
// their key table keeps a row per key, which the purge deletes once the
// key's events are all finished and purged and the key has been idle for
// the retention. The stores of this module implement it.
type KeyPurger interface {
	PurgeKeys(ctx context.Context, db core.DBTX, before time.Time, limit int) (int64, error)
}

// capability returns the purger's store as a T, looking through wrappers.
func capability[T any](store any) (T, bool) {
	if t, ok := store.(T); ok {
		return t, true
	}
	if st, ok := store.(core.Store); ok {
		return core.StoreAs[T](st)
	}
	var zero T
	return zero, false
}

// keyPurger returns the store's KeyPurger, looking through wrappers.
func (p *Purger) keyPurger() (KeyPurger, bool) { return capability[KeyPurger](p.cfg.Store) }

// PartitionMaintainer is implemented by stores whose table is partitioned
// (store/postgres with Config.Partitions; the method does nothing on that
// store's plain tables). MaintainPartitions creates the partitions the
// coming writes need and drops each partition whose rows a Purge with p
// would all delete, returning the names of the partitions it created and
// dropped.
type PartitionMaintainer interface {
	MaintainPartitions(ctx context.Context, db core.DBTX, now time.Time, p core.PurgeParams) (created, dropped []string, err error)
}

// partitionMaintainer returns the store's PartitionMaintainer, looking
// through wrappers.
func (p *Purger) partitionMaintainer() (PartitionMaintainer, bool) {
	return capability[PartitionMaintainer](p.cfg.Store)
}

// maintainPartitions runs the store's partition maintenance, if it has
// one, before the row batches: a dropped partition's rows are gone without
// a batch. Its rows are not counted in the rows a run returns (counting
// them would read them); the log line names the partitions.
func (p *Purger) maintainPartitions(ctx context.Context, now time.Time, params core.PurgeParams) error {
	pm, ok := p.partitionMaintainer()
	if !ok {
		return nil
	}
	created, dropped, err := pm.MaintainPartitions(ctx, p.cfg.DB, now, params)
	if len(created)+len(dropped) > 0 {
		p.log.LogAttrs(ctx, slog.LevelInfo, "outbox purge maintained the table's partitions",
			slog.Any("created", created), slog.Any("dropped", dropped))
	}
	if err != nil {
		return fmt.Errorf("purge: %w", err)
	}
	return nil
}

// purge maintains the partitions of a partitioned table, then deletes the
// old rows (purgeRows).
func (p *Purger) purge(ctx context.Context, stop <-chan struct{}) (int64, error) {
	started := time.Now()
	now := p.cfg.Now()
	params := core.PurgeParams{DoneBefore: now.Add(-p.cfg.Retention), Limit: p.cfg.BatchSize}
	if !p.cfg.KeepDead {
		params.DeadBefore = now.Add(-p.cfg.DeadRetention)
	}
	// A failed maintenance (a lock timeout on a busy table, a table not yet
	// partitioned) does not stop the row batches; the run returns its error
	// after them.
	perr := p.maintainPartitions(ctx, now, params)
	total, err := p.purgeRows(ctx, stop, started, params)
	return total, errors.Join(err, perr)
}

// purgeRows deletes batch after batch until a short batch, a failure, or
// stop, then, the same way, the rows of idle keys.
func (p *Purger) purgeRows(ctx context.Context, stop <-chan struct{}, started time.Time, params core.PurgeParams) (int64, error) {
	var total int64
	batches := 0
	for {
		n, err := p.batch(ctx, params)
		total += n
		batches++
		if err != nil {
			return total, fmt.Errorf("purge batch %d (%d rows deleted before it): %w", batches, total-n, err)
		}
		if n < int64(p.cfg.BatchSize) {
			break
		}
		select {
		case <-stop:
			p.logDeleted(ctx, total, batches, started, params)
			return total, nil
		default:
		}
	}
	p.logDeleted(ctx, total, batches, started, params)
	if kp, ok := p.keyPurger(); ok {
		if err := p.purgeKeys(ctx, stop, kp, params.DoneBefore); err != nil {
			return total, err
		}
	}
	return total, nil
}

// purgeKeys deletes the rows of keys idle since before, batch after batch.
// Key rows are not counted in the rows a run returns: they are not events.
func (p *Purger) purgeKeys(ctx context.Context, stop <-chan struct{}, kp KeyPurger, before time.Time) error {
	var total int64
	for {
		bctx, cancel := context.WithTimeout(ctx, p.cfg.QueryTimeout)
		n, err := kp.PurgeKeys(bctx, p.cfg.DB, before, p.cfg.BatchSize)
		cancel()
		total += n
		if err != nil {
			return fmt.Errorf("purge idle keys (%d deleted before): %w", total-n, err)
		}
		if n < int64(p.cfg.BatchSize) {
			break
		}
		select {
		case <-stop:
			return nil
		default:
		}
	}
	if total > 0 {
		p.log.LogAttrs(ctx, slog.LevelInfo, "outbox purge deleted the rows of idle ordered keys",
			slog.Int64("deleted", total), slog.Time("idle_before", before))
	}
	return nil
}

func (p *Purger) batch(ctx context.Context, params core.PurgeParams) (int64, error) {
	bctx, cancel := context.WithTimeout(ctx, p.cfg.QueryTimeout)
	defer cancel()
	n, err := p.cfg.Store.Purge(bctx, p.cfg.DB, params)
	if err != nil && ctx.Err() == nil && errors.Is(bctx.Err(), context.DeadlineExceeded) {
		return n, fmt.Errorf("query timeout of %s exceeded: %w", p.cfg.QueryTimeout, err)
	}
	return n, err
}

func (p *Purger) logDeleted(ctx context.Context, total int64, batches int, started time.Time, params core.PurgeParams) {
	if total == 0 {
		return
	}
	attrs := []slog.Attr{slog.Int64("deleted", total), slog.Int("batches", batches),
		slog.Int64("took_ms", time.Since(started).Milliseconds()), slog.Time("done_before", params.DoneBefore)}
	if !params.DeadBefore.IsZero() {
		attrs = append(attrs, slog.Time("dead_before", params.DeadBefore))
	}
	p.log.LogAttrs(ctx, slog.LevelInfo, "outbox purge deleted terminal events", attrs...)
}
