// Package dead lets operators and ops tooling inspect and replay DEAD outbox
// events: events that exhausted their attempts, failed permanently, or had
// no listener. A Manager lists them (oldest first), counts them, and replays
// them one by one or in batches. Replaying moves an event back to NEW with
// its attempts reset to 0, its last error cleared and its lease dropped, so
// the poller delivers it again.
//
// # Errors
//
// Every method returns its errors, so that a caller can always tell "no dead
// events" from "the database is down", the confusion an operator cannot
// afford during an incident: an empty list with a nil error means there is
// nothing, and any failure reaches the caller wrapped with context. ReplayAll returns the number of
// events it replayed before a failure together with the error, since those
// replays are committed and will be delivered. The Manager logs nothing.
//
// # Replay and at-least-once delivery
//
// A replayed event is delivered again, with the same event_id, to the
// listener registered for it now. Listeners (and the consumers behind them)
// must deduplicate on event_id: a DEAD event may have had side effects on an
// attempt whose outcome could not be recorded. Fix the cause (deploy the
// listener, repair the downstream system) before replaying, or the events
// simply die again after their attempts.
package dead

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/config"
)

// DefaultBatchSize is the number of events one ReplayAll statement replays
// when Config.BatchSize is zero.
const DefaultBatchSize = 500

// Config configures a Manager. The zero value of every optional field means
// the default stated in its comment; New validates the rest.
type Config struct {
	// DB is the pool (*sql.DB, *sqlx.DB) every statement runs on. Required.
	DB core.DBTX
	// Store runs the dead-event SQL; every store implements core.DeadStore.
	// Required.
	Store core.DeadStore
	// BatchSize caps the events one ReplayAll statement replays; each batch
	// is its own short statement. Default 500.
	BatchSize int
	// Now returns the current time; replayed events become available at
	// Now(). Default: time.Now.
	Now func() time.Time
}

// Manager queries, counts and replays DEAD events. It is safe for concurrent
// use.
type Manager struct {
	cfg Config
}

// New validates cfg and returns a Manager. Bad configuration returns an error
// matching core.ErrInvalid.
func New(cfg Config) (*Manager, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Manager{cfg: cfg}, nil
}

// validate reports the first field of c that New cannot accept.
func (c Config) validate() error {
	v := config.Validator{Component: "dead config"}
	v.Require("DB", c.DB != nil)
	v.Require("Store", c.Store != nil)
	config.NonNegative(&v, "BatchSize", c.BatchSize)
	return v.Err()
}

// withDefaults validates c and returns a copy with defaults applied.
func (c Config) withDefaults() (Config, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	c.BatchSize = cmp.Or(c.BatchSize, DefaultBatchSize)
	c.Now = config.Clock(c.Now)
	return c, nil
}

// List returns the DEAD events matching f's event type and aggregate type
// (empty matches all), oldest first, at most f.Limit of them (0 means 100).
// A row that cannot be decoded makes List return the events it could decode
// together with an error naming the bad row.
func (m *Manager) List(ctx context.Context, f core.DeadFilter) ([]core.Event, error) {
	if f.Limit < 0 {
		return nil, core.Invalid("dead filter", "Limit is negative")
	}
	// The store's error already names the operation ("query dead events:
	// ..."); another prefix would only repeat it.
	return m.cfg.Store.QueryDead(ctx, m.cfg.DB, f)
}

// Count returns the number of DEAD events matching f's event type and
// aggregate type (empty matches all); f.Limit is ignored.
func (m *Manager) Count(ctx context.Context, f core.DeadFilter) (int64, error) {
	f.Limit = 0
	return m.cfg.Store.CountDead(ctx, m.cfg.DB, f)
}

// Replay moves the DEAD event id back to NEW (attempts 0, error cleared,
// available now) and reports whether it did: false means the event does not
// exist or is not DEAD, and nothing changed. An empty id returns an error
// matching core.ErrInvalid.
func (m *Manager) Replay(ctx context.Context, id string) (bool, error) {
	if id == "" {
		return false, core.Invalid("event id", "is empty")
	}
	n, err := m.cfg.Store.ReplayDead(ctx, m.cfg.DB, []string{id}, m.cfg.Now())
	if err != nil {
		return false, fmt.Errorf("replay dead event %s: %w", id, err)
	}
	return n > 0, nil
}

// ReplayAll replays the DEAD events matching f's event type and aggregate
// type, oldest first, in batches of Config.BatchSize, each its own statement.
// f.Limit, when positive, caps the total replayed; otherwise ReplayAll
// replays as many as matched when it started, so that events dying again
// while it runs (a dispatcher is delivering the replayed ones) cannot keep it
// going forever. It returns how many events it replayed; on a failure it
// stops and returns that number with the error (those replays stand). If
// progress is not nil it is called after each batch with the running total.
func (m *Manager) ReplayAll(ctx context.Context, f core.DeadFilter, progress func(replayed int64)) (int64, error) {
	if f.Limit < 0 {
		return 0, core.Invalid("dead filter", "Limit is negative")
	}
	target := int64(f.Limit)
	if target == 0 {
		n, err := m.Count(ctx, f)
		if err != nil {
			return 0, fmt.Errorf("replay dead events: %w", err)
		}
		target = n
	}
	var total int64
	for total < target {
		limit := int(min(int64(m.cfg.BatchSize), target-total))
		n, err := m.cfg.Store.ReplayDeadBatch(ctx, m.cfg.DB, core.DeadFilter{EventType: f.EventType,
			AggregateType: f.AggregateType}, limit, m.cfg.Now())
		total += n
		if err != nil {
			return total, fmt.Errorf("replay dead events (%d replayed before the error): %w", total-n, err)
		}
		if progress != nil && n > 0 {
			progress(total)
		}
		if n < int64(limit) {
			break
		}
	}
	return total, nil
}

// BlockedKeys lists the keys of ordered aggregate types (see core.Ordering)
// held up by a DEAD head event, oldest dead head first, filtered by f's
// aggregate and event type, at most f.Limit of them (0 means 100). Each
// unblocks when its head is replayed (Replay) and delivered, or skipped
// (Skip). A store without ordered delivery (not a core.OrderedStore) has
// none: BlockedKeys returns nil.
func (m *Manager) BlockedKeys(ctx context.Context, f core.DeadFilter) ([]core.BlockedKey, error) {
	if f.Limit < 0 {
		return nil, core.Invalid("dead filter", "Limit is negative")
	}
	o, ok := m.ordered()
	if !ok {
		return nil, nil
	}
	keys, err := o.BlockedKeys(ctx, m.cfg.DB, f)
	if err != nil {
		return nil, fmt.Errorf("list blocked keys: %w", err)
	}
	return keys, nil
}

// Skip moves the key of each DEAD ordered event of ids past it without
// delivering it, so that the key's next event is delivered, and returns how
// many keys it moved. A skipped event stays DEAD with its last error (List
// still shows it; replaying it later would deliver it out of its key's
// order). Ids that are not the DEAD head of a key are left alone. A store
// without ordered delivery returns an error matching core.ErrInvalid.
func (m *Manager) Skip(ctx context.Context, ids ...string) (int64, error) {
	for _, id := range ids {
		if id == "" {
			return 0, core.Invalid("event id", "is empty")
		}
	}
	o, ok := m.ordered()
	if !ok {
		return 0, core.Invalid("dead store", "%T has no ordered delivery (core.OrderedStore): nothing to skip", m.cfg.Store)
	}
	n, err := o.SkipDead(ctx, m.cfg.DB, ids, m.cfg.Now())
	if err != nil {
		return n, fmt.Errorf("skip dead events: %w", err)
	}
	return n, nil
}

// ordered finds the store's ordered delivery, through wrappers when the
// store is a core.Store.
func (m *Manager) ordered() (core.OrderedStore, bool) {
	if st, ok := m.cfg.Store.(core.Store); ok {
		return core.StoreAs[core.OrderedStore](st)
	}
	o, ok := m.cfg.Store.(core.OrderedStore)
	return o, ok
}
