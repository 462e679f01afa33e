package outbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/active"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/lifecycle"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/outboxlog"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/purge"
	"github.com/outboxkit/outbox/txctx"
)

// Mode is the deployment an Outbox is wired for.
type Mode int

const (
	// SingleNode: this process is the only one using its table. It runs a
	// Writer whose hook feeds the dispatcher's hot queue, a Dispatcher and a
	// Poller (and a Purger when Config.Purge is set), and nothing that
	// coordinates with other processes.
	SingleNode Mode = iota
	// MultiNode: several processes share one table (other MultiNode
	// instances, WriterOnly processes). It runs what SingleNode runs, plus
	// what several processes need: a lease owner made unique per process
	// (New appends a random suffix to an explicit Config.Dispatch.Owner), a
	// purge that runs on one instance at a time (each run takes the
	// table's purge lock and is skipped when another instance holds it),
	// and, with Config.SingleActive, one claiming instance at a time. See
	// the package documentation for a table of what each mode runs.
	MultiNode
	// WriterOnly: this process only writes; another process (a MultiNode
	// Outbox, or CDC) delivers. It runs a Writer without a hook, and no
	// Dispatcher or Poller (a Purger when Config.Purge is set, under the
	// purge lock as in MultiNode). Its events are inserted unleased, so the
	// pollers of the delivering processes claim them at their next poll.
	WriterOnly
)

// String returns the mode's name.
func (m Mode) String() string {
	switch m {
	case SingleNode:
		return "SingleNode"
	case MultiNode:
		return "MultiNode"
	case WriterOnly:
		return "WriterOnly"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Delivery is how the events of the table reach the dispatcher.
type Delivery int

const (
	// DeliveryClaim: pollers claim pending rows with a lease, and every
	// delivered event is written DONE. The default, on every database and
	// in every Mode.
	DeliveryClaim Delivery = iota
	// DeliveryPosition: events without NotBefore are written as STREAM
	// rows with a position, and one reader per table delivers them in
	// position order from a persisted position; a delivered event costs no
	// write after its INSERT, and only a failure (RETRY, DEAD) writes its
	// row again, from where the claim path serves it. Events of the
	// aggregate types in the store's Ordered are delivered one at a time
	// per key, in commit order for writers that serialise on the key; a
	// failed head keeps its key waiting through the claim path's key table,
	// as in DeliveryClaim. Events with NotBefore take the claim path; an
	// ordered one is refused (core.ErrInvalid). PostgreSQL (a table that is not
	// partitioned), MariaDB 10.5+ (with the PROCESS privilege) and SQLite;
	// New refuses it on a partitioned table, Start on MySQL. Mode
	// SingleNode, MultiNode with SingleActive (the active instance is the
	// reader, and only it delivers its own writes through the hot path; the
	// others' writes are read after their commit's NOTIFY), or WriterOnly.
	// The table needs migration 0003 (outboxctl migrate up, or
	// CreateSchema). See docs/configuration.md#delivery.
	DeliveryPosition
)

// String returns the delivery's name.
func (d Delivery) String() string {
	switch d {
	case DeliveryClaim:
		return "DeliveryClaim"
	case DeliveryPosition:
		return "DeliveryPosition"
	}
	return fmt.Sprintf("Delivery(%d)", int(d))
}

// DB is the database handle an Outbox runs on: a pool (*sql.DB, *sqlx.DB)
// that begins transactions and runs statements.
type DB interface {
	core.DBTX
	core.TxBeginner
}

// Config configures an Outbox. DB and Store are required, and Registry unless
// Mode is WriterOnly. The component configurations (Dispatch, Poller, Purge)
// are the components' own: every field keeps its meaning and default, and
// the fields they share with this Config (Store, DB, Registry, Metrics,
// Logger) are filled from here when left zero.
type Config struct {
	// DB is the pool the components and Do run on. Required.
	DB DB
	// Store is the outbox table's store, e.g. postgres.New, mysql.New or
	// sqlite.New. Required.
	Store core.Store
	// Registry routes events to their listeners. Required unless Mode is
	// WriterOnly, where it must be nil: no listener would ever run.
	Registry *core.Registry
	// Mode is the deployment. Default SingleNode.
	Mode Mode
	// Delivery is how events reach the dispatcher: DeliveryClaim (the
	// default) or DeliveryPosition, which needs the table's migration 0003
	// and is refused where it does not run (see DeliveryPosition). Every
	// process sharing the table must use the same.
	Delivery Delivery
	// SingleActive, in MultiNode mode only, makes one instance per table
	// the active one, which claims and delivers the polled events; the
	// others stand by. The active instance holds a lock of the table on one
	// dedicated connection of DB (a session-level pg_try_advisory_lock on
	// PostgreSQL, GET_LOCK on MySQL and MariaDB; SQLite has none, and New
	// refuses SingleActive there) and checks it every
	// SingleActiveInterval; a standby tries to take it as often, so it
	// takes over within about two intervals when the active process dies or
	// loses its connection. Every instance keeps its hot path: events
	// written through Do are leased to the instance that wrote them and
	// delivered by it, whether active or standing by; their retries, and
	// everything written without the hot path, go to the active one.
	// Default false: every instance claims.
	SingleActive bool
	// SingleActiveInterval is how often a standby tries the relay lock and
	// the active instance checks it (each check must answer within it).
	// Default 1 s. It must be zero unless SingleActive is set.
	SingleActiveInterval time.Duration

	// Dispatch overrides the dispatcher's configuration (workers, queue
	// sizes, MaxAttempts, Retry, DrainTimeout, interceptors...). Its zero
	// fields take dispatch's defaults. Must be zero in WriterOnly mode.
	Dispatch dispatch.Config
	// Poller overrides the poller's configuration (Interval, BatchSize,
	// LeaseTimeout, SkipRecent...). Its zero fields take poller's defaults;
	// its Owner must be empty or equal to Dispatch.Owner. Must be zero in
	// WriterOnly mode.
	Poller poller.Config
	// Purge, when not nil, adds a purger of old DONE and DEAD rows with this
	// configuration (its zero fields take purge's defaults: 7 days, batches
	// of 500, hourly). Default nil: no purger.
	Purge *purge.Config

	// Logger is given to every component whose own Logger is nil (Dispatch,
	// Poller, Purge, Tx, the Writer). Nil: outboxlog.Default(): every
	// component sends its warnings and errors (DEAD events, store errors,
	// hot-queue overflow) to slog.Default(), which writes to stderr unless
	// the program changed it, and drops debug and info records. To silence
	// them, set slog.New(slog.DiscardHandler). A zerolog.Logger zl is wired
	// in with slog.New(zerolog.NewSlogHandler(zl)) (see package outboxlog).
	Logger *slog.Logger
	// Metrics is given to the dispatcher and poller when their own Metrics
	// is nil. Default: core.NopMetrics{}.
	Metrics core.Metrics
	// Tx configures the transactions Do begins (isolation level, read-only).
	// Its zero value is valid; its Logger defaults to Logger.
	Tx txctx.Config
	// ContextHeaders, when set, returns headers the Writer adds to every
	// event written in ctx, such as the trace context of the request
	// (contrib/outboxotel.ContextHeaders). An event's own header of the
	// same key wins. Default: none.
	ContextHeaders func(ctx context.Context) map[string]string
}

// Outbox wires a Writer, a Dispatcher, a Poller and optionally a Purger on
// one outbox table, started and stopped together. Every component is also
// reachable on its own. An Outbox is safe for concurrent use; its lifecycle
// is New, Start, Close.
type Outbox struct {
	mode       Mode
	store      core.Store
	db         DB
	log        *slog.Logger
	writer     *core.Writer
	dispatcher *dispatch.Dispatcher
	poller     *poller.Poller
	gate       *active.Gate     // SingleActive only
	reader     *position.Reader // DeliveryPosition, not WriterOnly
	posLog     position.Log     // DeliveryPosition
	purger     *purge.Purger
	txm        *txctx.Manager

	life *lifecycle.Staged // its one stage is the last: close every component
}

// New validates cfg and builds the components of cfg.Mode, without starting
// anything. Besides each component's own rules it checks the rules between
// them: there is one lease duration, Dispatch.LeaseTimeout or
// Poller.LeaseTimeout (set both and they must agree), given to both; and
// when the store cannot renew leases (it does not implement
// core.LeaseRenewer), the lease must exceed Dispatch.ListenerTimeout plus
// Dispatch.DoneBatchLinger (defaults applied), since a lease that expires
// while its event is still being delivered lets another poller deliver it
// again. With renewal (the SQL stores) a listener may be slower than the
// lease. Bad configuration returns an error matching core.ErrInvalid.
func New(cfg Config) (*Outbox, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	o := &Outbox{mode: cfg.Mode, store: cfg.Store, db: cfg.DB, log: outboxlog.Or(cfg.Logger)}
	o.life = lifecycle.NewStaged(lifecycle.Stages{Final: o.closeComponents})
	txCfg := cfg.Tx
	txCfg.Logger = cmp.Or(txCfg.Logger, cfg.Logger)
	var err error
	if o.txm, err = txctx.New(cfg.DB, txCfg); err != nil {
		return nil, err
	}

	var hook core.WriterHook
	writeStore := cfg.Store
	if cfg.Delivery == DeliveryPosition {
		o.posLog = positionLog(cfg.Store)
		var ordering core.Ordering
		if os, ok := core.StoreAs[core.OrderedStore](cfg.Store); ok {
			ordering = os.Ordering()
		}
		if cfg.Mode == WriterOnly {
			writeStore = position.WriterOnlyStore(cfg.Store, o.posLog, ordering)
		} else {
			// The reader's reads are position delivery's claims: the
			// poller's ClaimTimeout bounds them too.
			if o.reader, err = position.New(position.Config{Log: o.posLog, Store: cfg.Store, DB: cfg.DB,
				Ordering: ordering, Logger: cfg.Logger, CycleTimeout: cfg.Poller.ClaimTimeout}); err != nil {
				return nil, err
			}
			writeStore = o.reader.Store()
		}
	}
	if cfg.Mode != WriterOnly {
		dc := cfg.Dispatch
		dc.Store = cmp.Or(dc.Store, cfg.Store)
		if o.reader != nil {
			dc.Store = writeStore
		}
		dc.DB = cmp.Or(dc.DB, core.DBTX(cfg.DB))
		dc.Registry = cmp.Or(dc.Registry, cfg.Registry)
		dc.Metrics = cmp.Or(dc.Metrics, cfg.Metrics)
		dc.Logger = cmp.Or(dc.Logger, cfg.Logger)
		dc.LeaseTimeout = cmp.Or(dc.LeaseTimeout, cfg.Poller.LeaseTimeout) // the one lease; validate checked they agree
		if cfg.Mode == MultiNode && dc.Owner != "" {
			dc.Owner = uniqueOwner(dc.Owner)
		}
		if o.dispatcher, err = dispatch.New(dc); err != nil {
			return nil, err
		}
		pc := cfg.Poller
		pc.Store = cmp.Or(pc.Store, cfg.Store)
		if cfg.SingleActive {
			if o.gate, err = o.newGate(cfg); err != nil {
				return nil, err
			}
			pc.Store = o.gate.Store(pc.Store)
		}
		pc.DB = cmp.Or(pc.DB, core.DBTX(cfg.DB))
		pc.Handler = o.dispatcher
		pc.Owner = o.dispatcher.Owner()
		pc.LeaseTimeout = o.dispatcher.LeaseTimeout()
		pc.Metrics = cmp.Or(pc.Metrics, cfg.Metrics)
		pc.Logger = cmp.Or(pc.Logger, cfg.Logger)
		if o.poller, err = poller.New(pc); err != nil {
			return nil, err
		}
		hook = o.dispatcher.WriterHook()
		if o.reader != nil {
			o.reader.SetHandler(o.dispatcher)
			if o.gate != nil {
				o.reader.SetActive(o.gate.Active)
			}
			hook = o.reader.Hook(o.dispatcher.WriterHook())
		}
	}
	if cfg.Purge != nil {
		pc := *cfg.Purge
		pc.Store = cmp.Or(pc.Store, core.Purger(cfg.Store))
		if o.posLog != nil && pc.Store == core.Purger(cfg.Store) {
			pc.Store = position.PurgeStore(cfg.Store, o.posLog)
		}
		pc.DB = cmp.Or(pc.DB, core.DBTX(cfg.DB))
		pc.Logger = cmp.Or(pc.Logger, cfg.Logger)
		if cfg.sharedTable() && pc.Locker == nil {
			// Several processes share the table: one purges at a time. A
			// store without named locks (SQLite) purges unlocked, which is
			// safe, and a pool without dedicated connections too.
			_, conner := pc.DB.(core.Conner)
			if locker, ok := core.StoreAs[core.Locker](cfg.Store); ok && conner {
				pc.Locker = locker
			}
		}
		if o.purger, err = purge.New(pc); err != nil {
			return nil, err
		}
	}
	o.writer, err = core.NewWriter(core.WriterConfig{Store: writeStore, Hook: hook, Logger: cfg.Logger,
		ContextHeaders: cfg.ContextHeaders})
	if err != nil {
		return nil, err
	}
	return o, nil
}

// sharedTable reports whether other processes use the table too: every
// mode but SingleNode. It switches on what several processes need (the
// purge lock; the cross-instance wake-up).
func (c Config) sharedTable() bool { return c.Mode != SingleNode }

// newGate returns the single-active gate of cfg (validated), which wakes
// the poller when this instance becomes the active one, so that it claims
// at once instead of at its next interval.
func (o *Outbox) newGate(cfg Config) (*active.Gate, error) {
	locker, _ := core.StoreAs[core.Locker](cfg.Store)
	return active.New(active.Config{
		Locker:   locker,
		DB:       cfg.DB.(core.Conner),
		Interval: cfg.SingleActiveInterval,
		// o.poller is set before Start, which starts the gate's goroutine.
		OnChange: func(active bool) {
			if active {
				o.poller.Wake()
			}
		},
		Logger: cfg.Logger,
	})
}

// positionLog returns the position log of st, nil when it has none.
func positionLog(st core.Store) position.Log {
	return position.LogOf(st)
}

// validate reports the first rule of c that New cannot accept: the fields
// of c itself, then the rules between the components' settings that no
// component can check on its own. The components validate their own fields
// when New builds them.
func (c Config) validate() error {
	v := config.Validator{Component: "outbox config"}
	v.Require("DB", !nilDB(c.DB))
	v.Require("Store", c.Store != nil)
	v.Check(c.Mode >= SingleNode && c.Mode <= WriterOnly, "unknown Mode %d", int(c.Mode))
	v.Check(c.Delivery >= DeliveryClaim && c.Delivery <= DeliveryPosition, "unknown Delivery %d", int(c.Delivery))
	if v.Err() != nil {
		return v.Err()
	}
	if c.Delivery == DeliveryPosition {
		v.Check(positionLog(c.Store) != nil, "DeliveryPosition runs on PostgreSQL (a table that is not partitioned), "+
			"MariaDB and SQLite; %T has no position delivery: use DeliveryClaim", c.Store)
		v.Check(c.Mode != MultiNode || c.SingleActive, "DeliveryPosition in MultiNode mode needs SingleActive: "+
			"one instance at a time reads the table's position")
		v.Check(c.Dispatch.Store == nil, "Dispatch.Store is set with DeliveryPosition, which wraps Store for the "+
			"dispatcher: leave it empty")
		v.Check(!c.Dispatch.DeleteDelivered, "Dispatch.DeleteDelivered is set with DeliveryPosition, where a "+
			"delivered event is not written at all: the purge deletes what lies behind the position")
		if v.Err() != nil {
			return v.Err()
		}
	}
	v.Check(!c.SingleActive || c.Mode == MultiNode,
		"SingleActive is set in %s mode; it chooses one of several delivering instances: use MultiNode", c.Mode)
	config.NonNegative(&v, "SingleActiveInterval", c.SingleActiveInterval)
	v.Check(c.SingleActiveInterval == 0 || c.SingleActive, "SingleActiveInterval is set without SingleActive")
	if c.SingleActive {
		_, locks := core.StoreAs[core.Locker](c.Store)
		v.Check(locks, "SingleActive needs a store with named locks (core.Locker: PostgreSQL, MySQL, MariaDB); %T has none", c.Store)
		_, conner := c.DB.(core.Conner)
		v.Check(conner, "SingleActive needs a DB that hands out dedicated connections (*sql.DB, *sqlx.DB); %T does not", c.DB)
	}
	if v.Err() != nil {
		return v.Err()
	}
	if c.Mode == WriterOnly {
		v.Check(c.Registry == nil, "Registry is set in WriterOnly mode, where no listener runs")
		v.Check(!dispatchSet(c.Dispatch), "Dispatch is set in WriterOnly mode, which has no dispatcher")
		v.Check(!pollerSet(c.Poller), "Poller is set in WriterOnly mode, which has no poller")
		return v.Err()
	}
	v.Require("Registry", c.Registry != nil || c.Dispatch.Registry != nil)
	v.Check(c.Poller.Handler == nil, "Poller.Handler is set; the Outbox's dispatcher is the handler")
	v.Check(c.Poller.Owner == "" || c.Poller.Owner == c.Dispatch.Owner,
		"Poller.Owner %q differs from Dispatch.Owner %q; leave it empty", c.Poller.Owner, c.Dispatch.Owner)
	if v.Err() != nil {
		return v.Err()
	}
	// Negative values are the components' to report, with their own names.
	if c.Poller.LeaseTimeout < 0 || c.Dispatch.LeaseTimeout < 0 || c.Dispatch.ListenerTimeout < 0 || c.Dispatch.DoneBatchLinger < 0 {
		return nil
	}
	// One lease duration: the dispatcher renews leases for it, the poller
	// claims with it. Either field may carry it; set both, they must agree.
	v.Check(c.Poller.LeaseTimeout == 0 || c.Dispatch.LeaseTimeout == 0 || c.Poller.LeaseTimeout == c.Dispatch.LeaseTimeout,
		"Poller.LeaseTimeout %s differs from Dispatch.LeaseTimeout %s; set one of them", c.Poller.LeaseTimeout, c.Dispatch.LeaseTimeout)
	if v.Err() != nil {
		return v.Err()
	}
	lease := cmp.Or(c.Dispatch.LeaseTimeout, c.Poller.LeaseTimeout, dispatch.DefaultLeaseTimeout)
	if _, ok := core.StoreAs[core.LeaseRenewer](cmp.Or(c.Dispatch.Store, c.Store)); ok {
		// With renewal the lease of a held event is extended every
		// lease/3, each renewal bounded by lease/3, so a listener may be
		// slower than the lease: no rule ties the two. What remains is the
		// user's margin: the lease must outlast one failed renewal plus the
		// database's worst stall, which the defaults (30 s, renewed every
		// 10 s) leave.
		return nil
	}
	// Without renewal an event stays leased to this process from its claim
	// (or its insert, on the hot path) until its outcome is written: its
	// delivery, bounded by ListenerTimeout, then the wait for its DONE
	// batch, bounded by DoneBatchLinger. A lease that expires before both
	// are over lets another poller claim and deliver the event a second
	// time while the first delivery still runs. Time spent in the queues
	// adds to this and depends on load, so it is the user's margin; the
	// part the settings bound is checked here.
	linger := cmp.Or(c.Dispatch.DoneBatchLinger, dispatch.DefaultDoneBatchLinger)
	busy := c.Dispatch.ListenerTimeout + linger
	v.Check(lease > busy,
		"Poller.LeaseTimeout %s does not exceed Dispatch.ListenerTimeout %s plus Dispatch.DoneBatchLinger %s, and Store "+
			"does not implement core.LeaseRenewer: leases would expire while their events are still being delivered, and another poller would deliver them again",
		lease, c.Dispatch.ListenerTimeout, linger)
	return v.Err()
}

// nilDB reports whether db is nil, or a nil pool of the kinds users pass
// (a *sql.DB or *sqlx.DB variable not yet opened), which would otherwise
// fail only at the first statement.
func nilDB(db DB) bool {
	switch d := db.(type) {
	case nil:
		return true
	case *sql.DB:
		return d == nil
	case *sqlx.DB:
		return d == nil || d.DB == nil
	}
	return false
}

// dispatchSet reports whether any field of c is set. It names every field
// (a test checks that none is missed) so that a WriterOnly Outbox can refuse
// a dispatcher configuration it would silently ignore.
func dispatchSet(c dispatch.Config) bool {
	return c.Store != nil || c.DB != nil || c.Registry != nil || c.Owner != "" ||
		c.Workers != 0 || c.HotQueueSize != 0 || c.ColdQueueSize != 0 || c.MaxAttempts != 0 ||
		c.Retry != nil || c.DrainTimeout != 0 || c.ListenerTimeout != 0 || c.StoreTimeout != 0 || c.LeaseTimeout != 0 ||
		c.DoneBatchSize != 0 || c.DoneBatchLinger != 0 || c.DeleteDelivered || c.NoYieldAfterCommit ||
		c.Interceptors != nil || c.Metrics != nil || c.Logger != nil || c.Now != nil
}

// pollerSet is dispatchSet for the poller's configuration.
func pollerSet(c poller.Config) bool {
	return c.Store != nil || c.DB != nil || c.Handler != nil || c.Owner != "" ||
		c.LeaseTimeout != 0 || c.SkipRecent != 0 || c.BatchSize != 0 || c.MaxBatchSize != 0 || c.Interval != 0 ||
		c.BusyInterval != 0 || c.BusyFor != 0 || c.NoWatch ||
		c.ClaimTimeout != 0 || c.Metrics != nil || c.Logger != nil || c.Now != nil
}

// uniqueOwner appends a random suffix to owner, cutting owner so that the
// result fits core.MaxOwnerLen.
func uniqueOwner(owner string) string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	suffix := "-" + hex.EncodeToString(b[:])
	if room := core.MaxOwnerLen - len(suffix); len(owner) > room {
		owner = owner[:room]
	}
	return owner + suffix
}

// Mode returns the deployment the Outbox was built for.
func (o *Outbox) Mode() Mode { return o.mode }

// Writer returns the Writer that inserts events in the caller's
// transaction. Except in WriterOnly mode it carries the dispatcher's hook:
// events written in a transaction begun by Do (or any txctx.Manager) reach
// the hot queue right after COMMIT.
func (o *Outbox) Writer() *core.Writer { return o.writer }

// Dispatcher returns the dispatcher, or nil in WriterOnly mode.
func (o *Outbox) Dispatcher() *dispatch.Dispatcher { return o.dispatcher }

// Poller returns the poller, or nil in WriterOnly mode.
func (o *Outbox) Poller() *poller.Poller { return o.poller }

// Active reports whether this instance claims polled events: always in
// SingleNode mode and in MultiNode mode without SingleActive, never in
// WriterOnly mode, and with SingleActive while it holds the relay lock.
func (o *Outbox) Active() bool {
	if o.gate != nil {
		return o.gate.Active()
	}
	return o.poller != nil
}

// Purger returns the purger, or nil when Config.Purge was nil.
func (o *Outbox) Purger() *purge.Purger { return o.purger }

// TxManager returns the transaction manager Do uses, over Config.DB.
func (o *Outbox) TxManager() *txctx.Manager { return o.txm }

// Do runs fn in a transaction on Config.DB carried by fn's context, so that
// Writer().Write(ctx, ...) and txctx.From(ctx) find it; it commits when fn
// returns nil and rolls back otherwise (see txctx.Manager.Do, which it is).
// A Do inside a Do joins the outer transaction. Do works before Start and
// after Close: events written then wait in the table for a poller.
func (o *Outbox) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return o.txm.Do(ctx, fn)
}

// Start checks the outbox table, then starts the dispatcher, then (with
// SingleActive) the election of the active instance, then the poller, then
// the purger, and returns at once; in DeliveryPosition without
// SingleActive, once the position reader has loaded its position (at most
// 5 s), so that writes made after Start returns take the hot path. If one
// fails to start, those already started are closed and the error is
// returned. It returns
// core.ErrAlreadyStarted when called twice and core.ErrClosed after Close.
//
// The check runs once, when the store can (core.SchemaChecker: the stores
// of this module): a table that does not exist, or lacks what the store
// reads and writes (a table at an older schema version), makes Start return
// a *core.SchemaError, matching core.ErrSchema, that names the table and
// the command or call that creates or migrates it; nothing is started, and
// Start may be called again once the table is ready. A database that does
// not answer the check within 10 s (a server that is down) is logged once,
// with the driver's error, which names the host, and Start goes on: the
// poller retries its claims with backoff until the server is back.
//
// Cancelling ctx stops every component, each on its own as its Close does,
// and the Outbox then closes them as Close does; call Close in any case to
// wait for them and get the error. To shut down in order (the
// poller stops feeding the dispatcher before it drains), start with a
// context that outlives your work, e.g. context.WithoutCancel(ctx), and
// call Close.
func (o *Outbox) Start(ctx context.Context) error {
	if err := o.checkSchema(ctx); err != nil {
		return fmt.Errorf("start outbox: %w", err)
	}
	return o.life.Start(ctx, func(context.Context) error {
		var running []component
		for _, c := range o.components() {
			if err := c.Start(ctx); err != nil {
				for i := len(running) - 1; i >= 0; i-- {
					_ = running[i].Close(context.WithoutCancel(ctx))
				}
				return fmt.Errorf("start outbox: %w", err)
			}
			running = append(running, c)
		}
		o.awaitReader(ctx)
		return nil
	})
}

// schemaCheckTimeout bounds Start's check of the table.
const schemaCheckTimeout = 10 * time.Second

// readerStartTimeout bounds Start's wait for the position reader's first
// cycle.
const readerStartTimeout = 5 * time.Second

// awaitReader waits, in position delivery on an instance that is the
// table's reader from the start (no SingleActive election), until the
// reader has loaded its position: the hot path takes positions only from
// then on, so a write made right after Start returns is delivered by it
// rather than read back by the reader (and, on PostgreSQL, announced by a
// NOTIFY in its transaction). A first cycle that fails (a database that is
// down) or that takes longer than readerStartTimeout does not hold Start.
func (o *Outbox) awaitReader(ctx context.Context) {
	if o.reader == nil || o.gate != nil {
		return
	}
	t := time.NewTimer(readerStartTimeout)
	defer t.Stop()
	select {
	case <-o.reader.FirstCycle():
	case <-t.C:
	case <-ctx.Done():
	}
}

// checkSchema is Start's check of the table: the store's SchemaError, an
// ErrInvalid for a server position delivery cannot run on (MySQL), or
// nil, after logging any other failure of the check.
func (o *Outbox) checkSchema(ctx context.Context) error {
	check := func(ctx context.Context, db core.DBTX) error { return nil }
	if c, ok := core.StoreAs[core.SchemaChecker](o.store); ok {
		check = c.CheckSchema
	}
	if o.posLog != nil {
		check = o.posLog.CheckSchema
	}
	cctx, cancel := context.WithTimeout(ctx, schemaCheckTimeout)
	defer cancel()
	err := check(cctx, o.db)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, core.ErrSchema), errors.Is(err, core.ErrInvalid):
		// A table not ready, or a server the delivery cannot run on
		// (position delivery on MySQL).
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	}
	table := "the outbox table"
	if t, ok := core.StoreAs[interface{ Table() string }](o.store); ok {
		table = "table " + t.Table()
	}
	o.log.LogAttrs(ctx, slog.LevelError, "outbox: start: could not check "+table+"; starting anyway: the poller retries with backoff until the database answers",
		outboxlog.Err(err))
	return nil
}

// component is the lifecycle every background component shares.
type component interface {
	Start(ctx context.Context) error
	Close(ctx context.Context) error
}

// components returns the components that exist, in start order.
func (o *Outbox) components() []component {
	var cs []component
	if o.dispatcher != nil {
		cs = append(cs, o.dispatcher)
	}
	if o.gate != nil {
		cs = append(cs, o.gate)
	}
	if o.reader != nil {
		cs = append(cs, o.reader)
	}
	if o.poller != nil {
		cs = append(cs, o.poller)
	}
	if o.purger != nil {
		cs = append(cs, o.purger)
	}
	return cs
}

// Close stops the poller first, so that nothing new is claimed, then (with
// SingleActive) releases the relay lock, so that a standby takes over while
// this instance drains, then the dispatcher (which drains its queues for up to Dispatch.DrainTimeout and
// releases the leases of what it did not deliver), then the purger. It
// returns when no goroutine of any component is left. When ctx is done
// first, the dispatcher cancels its running listeners and every component
// stops at once. Close is idempotent; the error joins the components' own
// (see dispatch.Dispatcher.Close). The DB is not closed: it is the caller's.
func (o *Outbox) Close(ctx context.Context) error { return o.life.Close(ctx) }

// closeComponents is the shutdown of an Outbox, whether Close or the end of
// Start's context begins it: the poller first, so that nothing new is
// claimed, then the gate (releasing the relay lock only once this instance
// claims no more), then the dispatcher, then the purger. ctx ends when
// Close's does.
func (o *Outbox) closeComponents(ctx context.Context) error {
	var errs []error
	if o.poller != nil {
		errs = append(errs, o.poller.Close(ctx))
	}
	if o.reader != nil {
		errs = append(errs, o.reader.Close(ctx))
	}
	// With position delivery the relay lock is released only once the
	// drain's outcomes are saved: a standby that took the position over
	// before would deliver the drained events again.
	if o.gate != nil && o.reader == nil {
		errs = append(errs, o.gate.Close(ctx))
	}
	if o.dispatcher != nil {
		errs = append(errs, o.dispatcher.Close(ctx))
	}
	if o.reader != nil {
		// The outcomes of the drain resolve positions: save them, so that
		// a restart does not deliver those events again.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), schemaCheckTimeout)
		errs = append(errs, o.reader.Flush(fctx))
		cancel()
		if o.gate != nil {
			errs = append(errs, o.gate.Close(ctx))
		}
	}
	if o.purger != nil {
		errs = append(errs, o.purger.Close(ctx))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close outbox: %w", err)
	}
	return nil
}
