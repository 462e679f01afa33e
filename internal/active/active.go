// Package active elects the one instance per outbox table that claims
// events when an Outbox runs with SingleActive: a Gate holds a named lock of
// the table (core.Locker: a session-level pg_try_advisory_lock on
// PostgreSQL, GET_LOCK on MySQL and MariaDB) on one dedicated connection for
// as long as it is active, and wraps the poller's store so that its claims
// return nothing while it stands by.
//
// An instance standing by tries the lock every Config.Interval. The active
// one checks every Config.Interval that its session still holds the lock,
// and stands by as soon as a check fails or times out (the connection was
// lost, the server restarted). When the active process dies, its session
// ends with its connection (at once for a crash on a reachable host, after
// the server's TCP keepalive for a host that vanished), the lock is free,
// and a standby takes it at its next try.
//
// The lock makes one claimer the normal state; it is not what keeps delivery
// correct. Between the loss of an active instance's session and its next
// check, a standby may already hold the lock, so for up to about two
// intervals two instances may claim. The leases, fenced by owner, keep that
// safe as they keep any number of claimers safe.
package active

import (
	"cmp"
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/lifecycle"
	"github.com/outboxkit/outbox/outboxlog"
)

// DefaultInterval is how often a standby tries the lock and the active
// instance checks it.
const DefaultInterval = time.Second

// LockName is the name of the relay's lock of the table.
const LockName = "relay"

// Config configures a Gate.
type Config struct {
	// Locker takes the lock: the store's core.Locker. Required.
	Locker core.Locker
	// DB hands out the dedicated connection the lock lives on. Required.
	DB core.Conner
	// Interval is the time between two tries of a standby and between two
	// checks of the active instance; each check must answer within it.
	// Default DefaultInterval.
	Interval time.Duration
	// OnChange is called (on the Gate's goroutine, after Active changed)
	// each time this instance becomes the active one (true), e.g. to wake
	// the poller, and each time it stands by again (false). Optional.
	OnChange func(active bool)
	// Logger receives a line when this instance becomes active or stands
	// by. Default: outboxlog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	v := config.Validator{Component: "single-active relay"}
	v.Require("Locker", c.Locker != nil)
	v.Require("DB", c.DB != nil)
	config.NonNegative(&v, "Interval", c.Interval)
	if err := v.Err(); err != nil {
		return c, err
	}
	c.Interval = cmp.Or(c.Interval, DefaultInterval)
	return c, nil
}

// Gate elects this instance active or standby (see the package comment).
// Its lifecycle is New, Start, Close.
type Gate struct {
	cfg    Config
	log    *slog.Logger
	loop   lifecycle.Loop
	active atomic.Bool
}

// New validates cfg and returns a Gate, standing by until Start. Bad
// configuration returns an error matching core.ErrInvalid.
func New(cfg Config) (*Gate, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Gate{cfg: cfg, log: outboxlog.Or(cfg.Logger).With("component", "outbox.active")}, nil
}

// Start launches the election loop and returns at once; its first try of
// the lock runs immediately. It returns core.ErrAlreadyStarted or
// core.ErrClosed as every component does.
func (g *Gate) Start(ctx context.Context) error { return g.loop.Start(ctx, g.run) }

// Close stands this instance by and releases the lock, so that a standby
// takes over at its next try, and returns when the loop has exited. Close
// it after the poller, so that no claim of this instance follows the
// release. It is idempotent and always returns nil.
func (g *Gate) Close(ctx context.Context) error { return g.loop.Close(ctx) }

// Active reports whether this instance holds the lock, as of its last try or
// check.
func (g *Gate) Active() bool { return g.active.Load() }

// Store returns s wrapped so that Claim claims nothing while this instance
// stands by; every other method, and every capability (through Unwrap), is
// s's.
func (g *Gate) Store(s core.Store) core.Store { return gatedStore{Store: s, gate: g} }

// gatedStore is the poller's store under a Gate.
type gatedStore struct {
	core.Store
	gate *Gate
}

// Claim claims through the wrapped store while the instance is active, and
// returns nothing otherwise.
func (s gatedStore) Claim(ctx context.Context, db core.DBTX, p core.ClaimParams) ([]core.Event, []core.RowError, error) {
	if !s.gate.Active() {
		return nil, nil, nil
	}
	return s.Store.Claim(ctx, db, p)
}

// Unwrap returns the wrapped store, so that core.StoreAs finds its
// capabilities.
func (s gatedStore) Unwrap() core.Store { return s.Store }

// run is the election loop: try the lock while standing by, check it while
// active, every Interval.
func (g *Gate) run(ctx context.Context, stop <-chan struct{}) {
	var held core.Lock
	defer func() {
		// Stand by before the release: once the lock is free another
		// instance may claim, and this one must not any more.
		if held != nil {
			g.setActive(false)
			if err := held.Unlock(ctx); err != nil {
				g.log.LogAttrs(ctx, slog.LevelWarn, "outbox relay: releasing the relay lock failed; its session was closed instead", outboxlog.Err(err))
			}
		}
	}()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-stop:
			return
		case <-timer.C:
		}
		if held == nil {
			held = g.try(ctx)
		} else if !g.check(ctx, held) {
			held = nil
			// Try again at once: when only this session was lost (the
			// server restarted, the connection broke), nobody else may hold
			// the lock yet, and this instance can carry on.
			held = g.try(ctx)
		}
		timer.Reset(g.cfg.Interval)
	}
}

// setActive records the state and tells OnChange.
func (g *Gate) setActive(active bool) {
	g.active.Store(active)
	if g.cfg.OnChange != nil {
		g.cfg.OnChange(active)
	}
}

// minTryTimeout is the least time a try may take, connection included.
// A try that gives up does no harm but must be able to succeed: with a
// short Interval on a loaded machine, a new connection alone can outlast
// it, and a standby whose every try is cut short never takes over.
const minTryTimeout = time.Second

// try tries the lock once, for at most Interval (minTryTimeout at least),
// and returns it when taken.
func (g *Gate) try(ctx context.Context) core.Lock {
	tctx, cancel := context.WithTimeout(ctx, max(g.cfg.Interval, minTryTimeout))
	defer cancel()
	l, ok, err := g.cfg.Locker.TryLock(tctx, g.cfg.DB, LockName)
	if err != nil {
		g.log.LogAttrs(ctx, slog.LevelDebug, "outbox relay: trying the relay lock failed; standing by", outboxlog.Err(err))
		return nil
	}
	if !ok {
		return nil
	}
	g.setActive(true)
	g.log.LogAttrs(ctx, slog.LevelInfo, "outbox relay: this instance is now the active one")
	return l
}

// check reports whether l is still held. When it is not, or the check
// fails or does not answer within Interval, the instance stands by at once,
// before the lock is released, and l is released (or its session closed).
func (g *Gate) check(ctx context.Context, l core.Lock) bool {
	cctx, cancel := context.WithTimeout(ctx, g.cfg.Interval)
	err := l.Check(cctx)
	cancel()
	if err == nil {
		return true
	}
	g.setActive(false)
	g.log.LogAttrs(ctx, slog.LevelWarn, "outbox relay: the relay lock is lost; standing by", outboxlog.Err(err))
	_ = l.Unlock(ctx)
	return false
}
