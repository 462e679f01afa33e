package poller_test

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/poller"
)

// fakeStore is an in-memory core.Store with just the claim semantics the
// poller relies on: due rows in id order, leases that expire, fenced
// write-backs. The real stores are exercised by the end-to-end tests in
// package dispatch.
type fakeStore struct {
	mu         sync.Mutex
	rows       map[string]*core.Event
	bad        []core.RowError // returned (and leased) by the next claim
	claimErr   error
	releaseErr error // when set, Release fails and changes nothing
	claims     []core.ClaimParams
	releases   [][]string
	dead       map[string]string
	hold       chan struct{} // when set, Claim waits for it to be closed
}

func newFakeStore() *fakeStore {
	return &fakeStore{rows: make(map[string]*core.Event), dead: make(map[string]string)}
}

// add stores n NEW events due at due, ids prefix-000, prefix-001...
func (s *fakeStore) add(t *testing.T, prefix string, n int, due time.Time) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range n {
		id := fmt.Sprintf("%s-%03d", prefix, i)
		env, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("E"), JSON: []byte(`{}`), OccurredAt: due})
		if err != nil {
			t.Fatal(err)
		}
		s.rows[id] = &core.Event{Envelope: env, CreatedAt: due, AvailableAt: due}
	}
}

// holdClaims makes the next claims wait until the returned function is
// called.
func (s *fakeStore) holdClaims() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hold := make(chan struct{})
	s.hold = hold
	return func() {
		s.mu.Lock()
		s.hold = nil
		s.mu.Unlock()
		close(hold)
	}
}

func (s *fakeStore) setReleaseErr(err error) {
	s.mu.Lock()
	s.releaseErr = err
	s.mu.Unlock()
}

// releaseCalls returns the ids of every Release call so far.
func (s *fakeStore) releaseCalls() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.releases)
}

func (s *fakeStore) claimCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.claims)
}

func (s *fakeStore) leasedBy(owner string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.rows {
		if r.LockedBy == owner {
			n++
		}
	}
	return n
}

func (s *fakeStore) Claim(_ context.Context, _ core.DBTX, p core.ClaimParams) ([]core.Event, []core.RowError, error) {
	s.mu.Lock()
	if hold := s.hold; hold != nil {
		s.mu.Unlock()
		<-hold
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	s.claims = append(s.claims, p)
	if s.claimErr != nil {
		return nil, nil, s.claimErr
	}
	bad := s.bad[:min(len(s.bad), p.Limit)]
	s.bad = s.bad[len(bad):]
	var ids []string
	for id, r := range s.rows {
		if r.Status.Terminal() || r.AvailableAt.After(p.Now) || r.CreatedAt.After(p.Now.Add(-p.SkipRecent)) ||
			r.CreatedAt.Before(p.From) {
			continue
		}
		if r.LockedBy != "" && r.LockedAt.After(p.Now.Add(-p.LeaseTimeout)) {
			continue
		}
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(s.rows[a].CreatedAt.Compare(s.rows[b].CreatedAt), cmp.Compare(a, b))
	})
	var out []core.Event
	for _, id := range ids[:min(len(ids), p.Limit-len(bad))] {
		r := s.rows[id]
		r.LockedBy, r.LockedAt = p.Owner, p.Now
		out = append(out, *r)
	}
	return out, bad, nil
}

func (s *fakeStore) Release(_ context.Context, _ core.DBTX, owner string, ids []string) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.releases = append(s.releases, slices.Clone(ids))
	if s.releaseErr != nil {
		return 0, s.releaseErr
	}
	var n int64
	for _, id := range ids {
		if r := s.rows[id]; r != nil && r.LockedBy == owner {
			r.LockedBy, r.LockedAt = "", time.Time{}
			n++
		}
	}
	return n, nil
}

func (s *fakeStore) MarkDead(_ context.Context, _ core.DBTX, owner, id string, _ time.Time, lastErr string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead[id] = lastErr
	return true, nil
}

var errNotImplemented = errors.New("not implemented by fakeStore")

func (s *fakeStore) Insert(context.Context, core.DBTX, []core.Envelope, core.InsertOptions) error {
	return errNotImplemented
}

func (s *fakeStore) MarkDone(context.Context, core.DBTX, string, string, time.Time) (bool, error) {
	return false, errNotImplemented
}

func (s *fakeStore) MarkRetry(context.Context, core.DBTX, string, string, time.Time, string) (bool, error) {
	return false, errNotImplemented
}

func (s *fakeStore) Get(context.Context, core.DBTX, string) (core.Event, error) {
	return core.Event{}, errNotImplemented
}

func (s *fakeStore) QueryDead(context.Context, core.DBTX, core.DeadFilter) ([]core.Event, error) {
	return nil, errNotImplemented
}

func (s *fakeStore) CountDead(context.Context, core.DBTX, core.DeadFilter) (int64, error) {
	return 0, errNotImplemented
}

func (s *fakeStore) ReplayDead(context.Context, core.DBTX, []string, time.Time) (int64, error) {
	return 0, errNotImplemented
}

func (s *fakeStore) ReplayDeadBatch(context.Context, core.DBTX, core.DeadFilter, int, time.Time) (int64, error) {
	return 0, errNotImplemented
}

func (s *fakeStore) Purge(context.Context, core.DBTX, core.PurgeParams) (int64, error) {
	return 0, errNotImplemented
}

// nopDB satisfies core.DBTX; fakeStore ignores it.
type nopDB struct{}

func (nopDB) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, errNotImplemented
}

func (nopDB) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, errNotImplemented
}

func (nopDB) QueryRowContext(context.Context, string, ...any) *sql.Row { return nil }

// fakeHandler accepts up to capacity events, then refuses; accepted events
// are consumed at once unless hold is set.
type fakeHandler struct {
	mu       sync.Mutex
	capacity int
	refuse   map[string]bool
	got      []core.Event
}

func (h *fakeHandler) EnqueueCold(ev core.Event) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.capacity <= 0 || h.refuse[ev.ID()] {
		return false
	}
	h.capacity--
	h.got = append(h.got, ev)
	return true
}

func (h *fakeHandler) ColdCapacity() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(h.capacity, 0)
}

func (h *fakeHandler) setCapacity(n int) {
	h.mu.Lock()
	h.capacity = n
	h.mu.Unlock()
}

func (h *fakeHandler) received() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.got)
}

// ownerHandler is a handler with an owner token and a due-time subscription,
// like *dispatch.Dispatcher.
type ownerHandler struct {
	fakeHandler
	owner   string
	wakeups atomic.Pointer[func(time.Time)]
}

func (h *ownerHandler) Owner() string { return h.owner }

func (h *ownerHandler) NotifyDue(fn func(time.Time)) { h.wakeups.Store(&fn) }

// countMetrics counts the metrics the poller reports.
type countMetrics struct {
	core.NopMetrics
	dead, storeErrors atomic.Int64
}

func (m *countMetrics) DispatchDead() { m.dead.Add(1) }
func (m *countMetrics) StoreError()   { m.storeErrors.Add(1) }

// The fakes stand for a dispatcher through the poller's optional
// interfaces; a rename of one of them must show here too.
var (
	_ poller.OwnerSource        = (*ownerHandler)(nil)
	_ poller.DueNotifier        = (*ownerHandler)(nil)
	_ poller.LeaseTimeoutSource = (*leaseHandler)(nil)
)
