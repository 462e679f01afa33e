package position

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/delivery"
	"github.com/outboxkit/outbox/internal/writectx"
)

// Store returns the store the Writer and the dispatcher use in position
// delivery: inner, except that
//
//   - an insert writes undelayed events as STREAM rows (delayed ones take
//     the claim path; a delayed ordered one is refused), and, when leased
//     (a transaction whose commit the hot path sees), lets the hot path
//     hold the positions of the unordered ones; the reader alone delivers
//     the ordered ones, one at a time per key (keys.go);
//   - the outcomes of STREAM events (owner Reader.Owner, or a hot position)
//     write nothing when delivered, move the row from STREAM to RETRY or
//     DEAD when not (an ordered head: to the claim path's ordered delivery
//     with its key's queued events, Log.Divert), and resolve their
//     positions;
//   - their leases are neither renewed nor released: they have none.
//
// Everything else goes to inner.
func (r *Reader) Store() core.Store { return &store{Store: r.cfg.Store, r: r} }

// WriterOnlyStore is Store for a process that only writes: no hot path.
func WriterOnlyStore(inner core.Store, lg Log, ordering core.Ordering) core.Store {
	r := &Reader{cfg: Config{Store: inner, Log: lg, Ordering: ordering}, t: newTracker(0), keys: newKeys()}
	return &store{Store: inner, r: r}
}

type store struct {
	core.Store
	r *Reader
}

var (
	_ core.StoreUnwrapper = (*store)(nil)
	_ core.BatchMarker    = (*store)(nil)
	_ core.LeaseRenewer   = (*store)(nil)
	_ core.OrderedStore   = (*store)(nil)
	_ delivery.MemoryDone = (*store)(nil)
)

func (s *store) Unwrap() core.Store { return s.Store }

// streams reports whether env is written as a STREAM row: every event but
// a delayed one (NotBefore), which takes the claim path. An ordered event
// never takes that path here (check refuses a delayed one).
func (s *store) streams(env core.Envelope) bool {
	return env.AvailableAt().Equal(env.OccurredAt())
}

// isOrdered reports whether env is of an ordered aggregate type.
func (s *store) isOrdered(env core.Envelope) bool {
	if o := s.r.cfg.Ordering; len(o) > 0 {
		_, ok := o.Ordered(env.AggregateType())
		return ok
	}
	return false
}

// check refuses what position delivery cannot order: an ordered event
// without an aggregate id, or with a NotBefore (its key's later events
// would not wait for it).
func (s *store) check(envs []core.Envelope) error {
	for _, env := range envs {
		if !s.isOrdered(env) {
			continue
		}
		if env.AggregateID() == "" {
			return core.Invalid("aggregate id", "event %s is of ordered aggregate type %q and has no aggregate id", env.ID(), env.AggregateType())
		}
		if !s.streams(env) {
			return core.Invalid("not before", "event %s is of ordered aggregate type %q and has a NotBefore: "+
				"position delivery does not delay ordered events (DeliveryClaim does)", env.ID(), env.AggregateType())
		}
	}
	return nil
}

// Insert implements core.Store.
func (s *store) Insert(ctx context.Context, db core.DBTX, envs []core.Envelope, opts core.InsertOptions) error {
	_, err := s.InsertOrdered(ctx, db, envs, opts)
	return err
}

// InsertOrdered implements core.OrderedStore: the STREAM events in one
// statement (or a few), the others through inner.
func (s *store) InsertOrdered(ctx context.Context, db core.DBTX, envs []core.Envelope, opts core.InsertOptions) (core.InsertResult, error) {
	if err := s.check(envs); err != nil {
		return core.InsertResult{}, err
	}
	var stream, claim []core.Envelope
	var claimAt []int
	for i, env := range envs {
		if s.streams(env) {
			stream = append(stream, env)
		} else {
			claim = append(claim, env)
			claimAt = append(claimAt, i)
		}
	}
	if len(claim) > 0 && len(stream) > 0 {
		// Two writes: all-or-nothing, so that a failure of the second (a
		// duplicate id) leaves none of the first behind when the caller
		// commits anyway.
		var res core.InsertResult
		err := allOrNothing(ctx, db, func(db core.DBTX) (err error) {
			res, err = s.insertParts(ctx, db, envs, opts, stream, claim, claimAt)
			return err
		})
		return res, err
	}
	return s.insertParts(ctx, db, envs, opts, stream, claim, claimAt)
}

// insertParts writes the claim path's events of envs (claim, at the
// indexes claimAt) through inner, then the STREAM ones.
func (s *store) insertParts(ctx context.Context, db core.DBTX, envs []core.Envelope, opts core.InsertOptions,
	stream, claim []core.Envelope, claimAt []int) (core.InsertResult, error) {
	var res core.InsertResult
	if len(claim) > 0 {
		var cres core.InsertResult
		var err error
		if o, ok := core.StoreAs[core.OrderedStore](s.Store); ok {
			cres, err = o.InsertOrdered(ctx, db, claim, opts)
		} else {
			err = s.Store.Insert(ctx, db, claim, opts)
		}
		if err != nil {
			return core.InsertResult{}, err
		}
		res.Waiting = cres.Waiting
		if cres.Seqs != nil {
			res.Seqs = make([]int64, len(envs))
			for j, i := range claimAt {
				res.Seqs[i] = cres.Seqs[j]
			}
		}
	}
	if len(stream) == 0 {
		return res, nil
	}
	var missed bool
	if hi, ok := s.r.cfg.Log.(HeldInserter); ok && opts.LeaseOwner != "" && writectx.Marked(ctx) {
		var err error
		if missed, err = s.insertHeld(ctx, db, hi, stream); err != nil {
			return core.InsertResult{}, err
		}
	} else {
		pos, err := s.r.cfg.Log.InsertStream(ctx, db, stream)
		if err != nil {
			return core.InsertResult{}, err
		}
		if opts.LeaseOwner != "" {
			// An ordered event has no hot path: the reader delivers it, woken
			// by the hook at the commit when it runs in this process.
			for i, env := range stream {
				if s.isOrdered(env) {
					missed = missed || !s.r.live()
					continue
				}
				if !s.r.t.takeHot(env.ID(), pos[i]) {
					missed = true
				}
			}
		}
	}
	// The Writer signals only writes without a hot path; these have one,
	// but not for position delivery (this process is not the reader, or its
	// hot set is full): wake the reader when they commit. One signal per
	// transaction reaches the listeners.
	if missed {
		if n, ok := core.StoreAs[core.InsertNotifier](s.Store); ok {
			if err := n.NotifyInsert(ctx, db); err != nil {
				return core.InsertResult{}, err
			}
		}
	}
	return res, nil
}

// insertHeld writes stream, none of it ordered, with an INSERT that db's
// transaction may hold until its next statement or COMMIT (see package
// writectx): the events are taken hot before it runs, their positions
// unknown, and get them when it runs, or from a read that returns their
// rows first (see tracker). It reports whether an event missed the hot
// path (not the reader, or the hot set full).
func (s *store) insertHeld(ctx context.Context, db core.DBTX, hi HeldInserter, stream []core.Envelope) (missed bool, err error) {
	for _, env := range stream {
		missed = !s.r.t.takeHot(env.ID(), 0) || missed
	}
	// An id the hot path did not take is not hot: setHotPos and dropHot
	// leave it alone.
	err = hi.InsertStreamHeld(ctx, db, stream, func(i int, pos int64) { s.r.t.setHotPos(stream[i].ID(), pos) })
	if err != nil {
		for _, env := range stream {
			s.r.t.dropHot(env.ID())
		}
		return false, err
	}
	return missed, nil
}

// allOrNothing runs write in a transaction of its own when db is a pool,
// else under a savepoint of the caller's transaction, rolled back when write
// fails.
func allOrNothing(ctx context.Context, db core.DBTX, write func(core.DBTX) error) error {
	if b, ok := db.(core.TxBeginner); ok {
		tx, err := b.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("insert events: %w", err)
		}
		if err := write(tx); err != nil {
			_ = tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("insert events: %w", err)
		}
		return nil
	}
	const sp = "outbox_insert_parts"
	if _, err := db.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	if err := write(db); err != nil {
		if _, rerr := db.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+sp); rerr != nil {
			return errors.Join(err, fmt.Errorf("roll back partial insert: %w", rerr))
		}
		return err
	}
	if _, err := db.ExecContext(ctx, "RELEASE SAVEPOINT "+sp); err != nil {
		return fmt.Errorf("insert events: %w", err)
	}
	return nil
}

// Ordering implements core.OrderedStore.
func (s *store) Ordering() core.Ordering { return s.r.cfg.Ordering }

func (s *store) ordered() core.OrderedStore {
	o, _ := core.StoreAs[core.OrderedStore](s.Store)
	return o
}

// MarkDoneOrdered implements core.OrderedStore: the ids of STREAM events
// (which carry no seq) resolve their positions, the others (events of the
// claim path's ordered delivery) go to inner.
func (s *store) MarkDoneOrdered(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, []core.Event, error) {
	rest, n := s.resolveDone(ctx, ids)
	if len(rest) == 0 {
		return n, nil, nil
	}
	m, evs, err := s.ordered().MarkDoneOrdered(ctx, db, owner, rest, now)
	return n + m, evs, err
}

// MarkDeadOrdered implements core.OrderedStore.
func (s *store) MarkDeadOrdered(ctx context.Context, db core.DBTX, owner, id string, now time.Time, lastErr string) (bool, []core.Event, error) {
	if s.r.t.beginFail(id) {
		ok, err := s.failed(ctx, db, id, true, now, lastErr)
		return ok, nil, err
	}
	return s.ordered().MarkDeadOrdered(ctx, db, owner, id, now, lastErr)
}

// BlockedKeys implements core.OrderedStore.
func (s *store) BlockedKeys(ctx context.Context, db core.DBTX, f core.DeadFilter) ([]core.BlockedKey, error) {
	return s.ordered().BlockedKeys(ctx, db, f)
}

// SkipDead implements core.OrderedStore.
func (s *store) SkipDead(ctx context.Context, db core.DBTX, ids []string, now time.Time) (int64, error) {
	return s.ordered().SkipDead(ctx, db, ids, now)
}

// split calls own for each id of a STREAM event the reader tracks and
// returns the other ids, and how many it called own for.
func (s *store) split(ids []string, own func(id string)) (rest []string, n int64) {
	for _, id := range ids {
		if s.r.t.owns(id) {
			own(id)
			n++
			continue
		}
		rest = append(rest, id)
	}
	return rest, n
}

// ResolveDone implements delivery.MemoryDone: the DONE of an event the
// reader handed over is a memory operation, done at once in the worker
// that delivered it rather than through the dispatcher's write-back.
func (s *store) ResolveDone(ctx context.Context, id string) bool {
	if !s.r.t.resolveOwned(id) {
		return false
	}
	s.r.next(ctx, id)
	return true
}

// resolveDone resolves the ids of STREAM events, hands over the next event
// of each ordered key whose head it resolved, and returns the others and
// how many it resolved.
func (s *store) resolveDone(ctx context.Context, ids []string) (rest []string, n int64) {
	// No wake-up: a resolved position only moves the floor, which the
	// next cycle saves; waking the reader per outcome would write the
	// position table per DONE batch.
	for _, id := range ids {
		if s.ResolveDone(ctx, id) {
			n++
			continue
		}
		rest = append(rest, id)
	}
	return rest, n
}

// MarkDone implements core.Store.
func (s *store) MarkDone(ctx context.Context, db core.DBTX, owner, id string, now time.Time) (bool, error) {
	if s.ResolveDone(ctx, id) {
		return true, nil
	}
	return s.Store.MarkDone(ctx, db, owner, id, now)
}

// MarkDoneBatch implements core.BatchMarker.
func (s *store) MarkDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, error) {
	rest, n := s.resolveDone(ctx, ids)
	if len(rest) == 0 {
		return n, nil
	}
	bm, ok := core.StoreAs[core.BatchMarker](s.Store)
	if !ok {
		for _, id := range rest {
			done, err := s.Store.MarkDone(ctx, db, owner, id, now)
			if err != nil {
				return n, err
			}
			if done {
				n++
			}
		}
		return n, nil
	}
	m, err := bm.MarkDoneBatch(ctx, db, owner, rest, now)
	return n + m, err
}

// fail writes the RETRY or DEAD of a STREAM event marked failing and
// resolves it once written.
func (s *store) fail(ctx context.Context, db core.DBTX, id string, dead bool, at time.Time, lastErr string) (bool, error) {
	ok, err := s.r.cfg.Log.MarkFailed(ctx, db, id, dead, at, lastErr)
	if err != nil {
		return false, err
	}
	s.r.t.resolve(id)
	return ok, nil
}

// failed writes the RETRY or DEAD of a STREAM event marked failing. The
// head of an ordered key goes, with the events queued behind it, to the
// claim path's ordered delivery (Log.Divert), which keeps the key waiting
// behind it; a DEAD head of a key whose policy is core.DeadContinues is
// written DEAD alone, and the key's next event goes.
func (s *store) failed(ctx context.Context, db core.DBTX, id string, dead bool, at time.Time, lastErr string) (bool, error) {
	key, ok := s.r.keys.holds(id)
	if !ok {
		return s.fail(ctx, db, id, dead, at, lastErr)
	}
	if p, _ := s.r.cfg.Ordering.Ordered(key.AggregateType); dead && p == core.DeadContinues {
		ok, err := s.fail(ctx, db, id, true, at, lastErr)
		if err == nil {
			s.r.next(ctx, id)
		}
		return ok, err
	}
	key, ids, ok := s.r.keys.beginDivert(id)
	if !ok {
		return s.fail(ctx, db, id, dead, at, lastErr)
	}
	for _, other := range ids[1:] {
		// Once moved, their outcomes are the claim path's.
		s.r.t.beginFail(other)
	}
	moved, err := s.r.cfg.Log.Divert(ctx, db, key, ids, &Failure{Dead: dead, At: at, LastErr: lastErr})
	if err != nil {
		return false, err // the dispatcher tries again; the key stays failing
	}
	for _, other := range ids {
		s.r.t.resolve(other)
	}
	s.r.keys.endDivert(key, ids)
	s.r.Wake() // the events of the key read meanwhile follow
	return moved, nil
}

// MarkRetry implements core.Store.
func (s *store) MarkRetry(ctx context.Context, db core.DBTX, owner, id string, next time.Time, lastErr string) (bool, error) {
	if s.r.t.beginFail(id) {
		return s.failed(ctx, db, id, false, next, lastErr)
	}
	return s.Store.MarkRetry(ctx, db, owner, id, next, lastErr)
}

// MarkDead implements core.Store.
func (s *store) MarkDead(ctx context.Context, db core.DBTX, owner, id string, now time.Time, lastErr string) (bool, error) {
	if s.r.t.beginFail(id) {
		return s.failed(ctx, db, id, true, now, lastErr)
	}
	return s.Store.MarkDead(ctx, db, owner, id, now, lastErr)
}

// Release implements core.Store: a STREAM event given back is read again.
func (s *store) Release(ctx context.Context, db core.DBTX, owner string, ids []string) (int64, error) {
	rest, n := s.split(ids, s.r.t.giveBack)
	if n > 0 {
		s.r.Wake()
	}
	if len(rest) == 0 {
		return n, nil
	}
	m, err := s.Store.Release(ctx, db, owner, rest)
	return n + m, err
}

// RenewLeases implements core.LeaseRenewer: STREAM events have no lease
// to lose.
func (s *store) RenewLeases(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) ([]string, error) {
	var rest []string
	for _, id := range ids {
		if !s.r.t.owns(id) {
			rest = append(rest, id)
		}
	}
	if len(rest) == 0 {
		return nil, nil
	}
	lr, ok := core.StoreAs[core.LeaseRenewer](s.Store)
	if !ok {
		return nil, fmt.Errorf("renew leases: %T cannot renew leases", s.Store)
	}
	lost, err := lr.RenewLeases(ctx, db, owner, rest, now)
	// A failing event's row stays STREAM, with no lease, until its RETRY
	// or DEAD lands: it is not lost. Reported lost, the dispatcher would
	// drop the write it retries after a failure (a database outage), and
	// the event, delivered once and failed, would wait for a restart.
	// That write is fenced by status = 5 itself.
	return slices.DeleteFunc(lost, s.r.t.isFailing), err
}

// Hook wraps the dispatcher's writer hook: after commit, it hands on the
// events of the claim path and the STREAM events whose positions the hot
// path holds, and leaves the other STREAM events to the reader (another
// process is the reader, or the hot path was full).
func (r *Reader) Hook(inner core.LeasingHook) core.LeasingHook { return hook{LeasingHook: inner, r: r} }

type hook struct {
	core.LeasingHook
	r *Reader
}

func (h hook) keep(envs []core.Envelope) []core.Envelope {
	s := store{r: h.r}
	out := envs[:0:0]
	for _, env := range envs {
		if s.streams(env) && !h.r.t.isHot(env.ID()) {
			continue
		}
		out = append(out, env)
	}
	return out
}

// AfterCommit implements core.WriterHook.
func (h hook) AfterCommit(ctx context.Context, envs []core.Envelope) error {
	keep := h.keep(envs)
	if len(keep) < len(envs) {
		h.r.Wake()
	}
	if len(keep) == 0 {
		return nil
	}
	return h.LeasingHook.AfterCommit(ctx, keep)
}

// AfterRollback implements core.WriterHook: the hot path gives up the
// transaction's positions, and the reader reads those it passed again (the
// COMMIT may have gone through unreported; see tracker.dropHot).
func (h hook) AfterRollback(ctx context.Context, envs []core.Envelope) error {
	for _, env := range envs {
		h.r.t.dropHot(env.ID())
	}
	return h.LeasingHook.AfterRollback(ctx, envs)
}

// PurgeStore returns inner with a Purge that, once inner's batch of DONE
// and DEAD rows comes back short, deletes delivered STREAM rows (at or
// below the persisted floor) older than the DONE retention.
func PurgeStore(inner core.Store, lg Log) core.Store { return purgeStore{Store: inner, lg: lg} }

type purgeStore struct {
	core.Store
	lg Log
}

func (s purgeStore) Unwrap() core.Store { return s.Store }

// Purge implements core.Purger.
func (s purgeStore) Purge(ctx context.Context, db core.DBTX, p core.PurgeParams) (int64, error) {
	n, err := s.Store.Purge(ctx, db, p)
	if err != nil || n >= int64(p.Limit) || p.DoneBefore.IsZero() {
		return n, err
	}
	m, err := s.lg.PurgeStream(ctx, db, p.DoneBefore, p.Limit-int(n))
	return n + m, err
}
