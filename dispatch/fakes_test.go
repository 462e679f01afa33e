package dispatch_test

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
)

// memStore is an in-memory core.Store for the dispatcher's unit tests. It
// follows the SPI's fencing rules; the real stores are exercised by the
// end-to-end tests.
type memStore struct {
	mu      sync.Mutex
	rows    map[string]*core.Event
	changed chan struct{} // closed and replaced on every change

	// failMark, when set, makes MarkDone/MarkRetry/MarkDead/Release fail.
	failMark  error
	retries   int // MarkRetry calls that changed a row
	releases  [][]string
	writeCall atomic.Int64
}

func newMemStore() *memStore {
	return &memStore{rows: make(map[string]*core.Event), changed: make(chan struct{})}
}

func (s *memStore) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *memStore) Insert(_ context.Context, _ core.DBTX, envs []core.Envelope, opts core.InsertOptions) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, env := range envs {
		if _, dup := s.rows[env.ID()]; dup {
			return core.ErrDuplicateEvent
		}
	}
	for _, env := range envs {
		s.rows[env.ID()] = &core.Event{
			Envelope: env, Status: core.StatusNew,
			CreatedAt: env.OccurredAt(), AvailableAt: env.AvailableAt(),
			LockedBy: opts.LeaseOwner, LockedAt: opts.LeaseAt,
		}
	}
	s.notifyLocked()
	return nil
}

func (s *memStore) Claim(_ context.Context, _ core.DBTX, p core.ClaimParams) ([]core.Event, []core.RowError, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var due []*core.Event
	for _, r := range s.rows {
		if r.Status.Terminal() || r.AvailableAt.After(p.Now) || r.CreatedAt.After(p.Now.Add(-p.SkipRecent)) {
			continue
		}
		if r.LockedBy != "" && r.LockedAt.After(p.Now.Add(-p.LeaseTimeout)) {
			continue
		}
		due = append(due, r)
	}
	slices.SortFunc(due, func(a, b *core.Event) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID(), b.ID()))
	})
	var out []core.Event
	for _, r := range due[:min(len(due), p.Limit)] {
		r.LockedBy, r.LockedAt = p.Owner, p.Now
		out = append(out, *r)
	}
	s.notifyLocked()
	return out, nil, nil
}

func (s *memStore) Release(_ context.Context, _ core.DBTX, owner string, ids []string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeCall.Add(1)
	if s.failMark != nil {
		return 0, s.failMark
	}
	s.releases = append(s.releases, slices.Clone(ids))
	var n int64
	for _, id := range ids {
		if r := s.rows[id]; r != nil && r.LockedBy == owner && !r.Status.Terminal() {
			r.LockedBy, r.LockedAt = "", time.Time{}
			n++
		}
	}
	s.notifyLocked()
	return n, nil
}

// mark applies a fenced write-back.
func (s *memStore) mark(owner, id string, fn func(r *core.Event)) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writeCall.Add(1)
	if s.failMark != nil {
		return false, s.failMark
	}
	r := s.rows[id]
	if r == nil || r.LockedBy != owner || r.Status.Terminal() {
		return false, nil
	}
	fn(r)
	r.LockedBy, r.LockedAt = "", time.Time{}
	s.notifyLocked()
	return true, nil
}

func (s *memStore) MarkDone(_ context.Context, _ core.DBTX, owner, id string, now time.Time) (bool, error) {
	return s.mark(owner, id, func(r *core.Event) { r.Status, r.DoneAt = core.StatusDone, now })
}

func (s *memStore) MarkRetry(_ context.Context, _ core.DBTX, owner, id string, next time.Time, lastErr string) (bool, error) {
	return s.mark(owner, id, func(r *core.Event) {
		s.retries++
		r.Status, r.Attempts, r.AvailableAt, r.LastError = core.StatusRetry, r.Attempts+1, next, lastErr
	})
}

func (s *memStore) MarkDead(_ context.Context, _ core.DBTX, owner, id string, now time.Time, lastErr string) (bool, error) {
	return s.mark(owner, id, func(r *core.Event) {
		r.Status, r.Attempts, r.DoneAt, r.LastError = core.StatusDead, r.Attempts+1, now, lastErr
	})
}

func (s *memStore) Get(_ context.Context, _ core.DBTX, id string) (core.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[id]
	if r == nil {
		return core.Event{}, sql.ErrNoRows
	}
	return *r, nil
}

var errNotImplemented = errors.New("not implemented by memStore")

func (s *memStore) QueryDead(context.Context, core.DBTX, core.DeadFilter) ([]core.Event, error) {
	return nil, errNotImplemented
}

func (s *memStore) CountDead(context.Context, core.DBTX, core.DeadFilter) (int64, error) {
	return 0, errNotImplemented
}

func (s *memStore) ReplayDead(context.Context, core.DBTX, []string, time.Time) (int64, error) {
	return 0, errNotImplemented
}

func (s *memStore) ReplayDeadBatch(context.Context, core.DBTX, core.DeadFilter, int, time.Time) (int64, error) {
	return 0, errNotImplemented
}

func (s *memStore) Purge(context.Context, core.DBTX, core.PurgeParams) (int64, error) {
	return 0, errNotImplemented
}

func (s *memStore) get(t *testing.T, id string) core.Event {
	t.Helper()
	ev, err := s.Get(context.Background(), nil, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return ev
}

// waitFor waits until cond holds on the store's rows, or fails the test.
func (s *memStore) waitFor(t *testing.T, what string, cond func(rows map[string]*core.Event) bool) {
	t.Helper()
	ok := testnode.Await(10*time.Second, func() (bool, <-chan struct{}) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return cond(s.rows), s.changed
	})
	if !ok {
		t.Fatalf("timed out waiting for %s", what)
	}
}

func (s *memStore) waitStatus(t *testing.T, id string, st core.Status) core.Event {
	t.Helper()
	s.waitFor(t, id+" to become "+st.String(), func(rows map[string]*core.Event) bool {
		return rows[id] != nil && rows[id].Status == st
	})
	return s.get(t, id)
}

// insertLeased stores a NEW event leased by owner and returns it as the
// dispatcher receives it.
func (s *memStore) insertLeased(t *testing.T, owner string, env core.Envelope) core.Event {
	t.Helper()
	now := time.Now()
	if err := s.Insert(context.Background(), nil, []core.Envelope{env}, core.InsertOptions{LeaseOwner: owner, LeaseAt: now}); err != nil {
		t.Fatal(err)
	}
	return s.get(t, env.ID())
}

// nopDB satisfies core.DBTX; memStore ignores it.
type nopDB struct{}

func (nopDB) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, errNotImplemented
}

func (nopDB) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, errNotImplemented
}

func (nopDB) QueryRowContext(context.Context, string, ...any) *sql.Row { return nil }

// fixedDelay is a deterministic RetryPolicy: attempt n waits n*step.
type fixedDelay struct{ step time.Duration }

func (f fixedDelay) Delay(n int) time.Duration { return time.Duration(n) * f.step }

// batchStore is a memStore with the core.BatchMarker capability; it records
// every MarkDoneBatch call.
type batchStore struct {
	*memStore

	bmu       sync.Mutex
	batches   []batchCall
	failBatch error         // when set, MarkDoneBatch fails and changes nothing
	gate      chan struct{} // when set, MarkDoneBatch waits until it is closed
	entered   chan struct{} // when set, MarkDoneBatch sends on it first
}

type batchCall struct {
	owner string
	ids   []string
}

var _ core.BatchMarker = (*batchStore)(nil)

func newBatchStore() *batchStore { return &batchStore{memStore: newMemStore()} }

func (s *batchStore) MarkDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (int64, error) {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.gate != nil {
		<-s.gate
	}
	s.bmu.Lock()
	s.batches = append(s.batches, batchCall{owner, slices.Clone(ids)})
	fail := s.failBatch
	s.bmu.Unlock()
	if fail != nil {
		s.mu.Lock()
		s.notifyLocked() // wake waiters: the call happened
		s.mu.Unlock()
		return 0, fail
	}
	var n int64
	for _, id := range ids {
		ok, err := s.memStore.MarkDone(ctx, db, owner, id, now)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// setFailBatch makes MarkDoneBatch fail with err (nil: succeed).
func (s *batchStore) setFailBatch(err error) {
	s.bmu.Lock()
	s.failBatch = err
	s.bmu.Unlock()
}

// calls returns the MarkDoneBatch calls so far.
func (s *batchStore) calls() []batchCall {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	return slices.Clone(s.batches)
}
