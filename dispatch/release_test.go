package dispatch_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
)

// flakyReleaseStore fails its first fails Release calls, then releases as
// memStore does. Every call, failed or not, sends its ids on calls.
type flakyReleaseStore struct {
	*memStore
	fails atomic.Int32
	calls chan []string
}

func (s *flakyReleaseStore) Release(ctx context.Context, db core.DBTX, owner string, ids []string) (int64, error) {
	defer func() { s.calls <- slices.Clone(ids) }()
	if s.fails.Add(-1) >= 0 {
		return 0, errors.New("connection reset by peer")
	}
	return s.memStore.Release(ctx, db, owner, ids)
}

// newFlakyDispatcher returns a dispatcher on a store whose first fails
// releases fail, and a delayed event inserted leased by the dispatcher: the
// writer hook releases it at once, since it is not due yet.
func newFlakyDispatcher(t *testing.T, fails int32) (*dispatch.Dispatcher, *flakyReleaseStore, *testnode.Metrics, core.Envelope) {
	t.Helper()
	st := &flakyReleaseStore{memStore: newMemStore(), calls: make(chan []string, 100)}
	st.fails.Store(fails)
	m := &testnode.Metrics{}
	d, err := dispatch.New(dispatch.Config{
		Store: st, DB: nopDB{}, Registry: core.NewRegistry(), Owner: testOwner, Metrics: m,
		Now: func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	env, err := core.NewEnvelope(core.EnvelopeSpec{ID: "later", Type: orderPlaced, AggregateType: orders, JSON: []byte(`1`), NotBefore: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Insert(context.Background(), nil, []core.Envelope{env}, core.InsertOptions{LeaseOwner: testOwner, LeaseAt: t0}); err != nil {
		t.Fatal(err)
	}
	return d, st, m, env
}

// waitRelease returns the ids of the next Release call.
func (s *flakyReleaseStore) waitRelease(t *testing.T) []string {
	t.Helper()
	select {
	case ids := <-s.calls:
		return ids
	case <-time.After(10 * time.Second):
		t.Fatal("no Release call within 10s")
		return nil
	}
}

// A release that fails is tried again in the background until it lands, so
// that the event does not wait for its lease to expire; the poller is then
// woken.
func TestFailedReleaseIsRetried(t *testing.T) {
	t.Parallel()
	d, st, m, env := newFlakyDispatcher(t, 3)
	woken := make(chan time.Time, 10)
	d.NotifyDue(func(at time.Time) { woken <- at })
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })

	err := d.WriterHook().AfterCommit(context.Background(), []core.Envelope{env})
	if err == nil || !strings.Contains(err.Error(), "retrying in the background") {
		t.Errorf("AfterCommit error = %v, want the failed release, retried in the background", err)
	}
	// The hook's try and two background tries fail; the third one lands.
	for i := range 4 {
		if ids := st.waitRelease(t); !slices.Equal(ids, []string{"later"}) {
			t.Fatalf("release %d of %v, want [later]", i+1, ids)
		}
	}
	if got := st.get(t, "later").LockedBy; got != "" {
		t.Errorf("after the retries the row is locked by %q, want released", got)
	}
	if n := m.Counts().StoreError; n != 3 {
		t.Errorf("StoreError = %d, want 3 (one per failed release)", n)
	}
	select {
	case at := <-woken:
		if !at.Equal(t0) {
			t.Errorf("poller woken for %v, want now (%v)", at, t0)
		}
	case <-time.After(10 * time.Second):
		t.Error("the poller was not woken after the release landed")
	}
	if err := d.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case ids := <-st.calls:
		t.Errorf("Close released %v again", ids)
	default:
	}
}

// Close makes a last attempt at the releases that failed, also when the
// dispatcher never started, and reports one that fails again.
func TestCloseReleasesWhatFailedBefore(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		fails   int32
		wantErr bool
	}{
		{"lands", 1, false},
		{"fails again", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d, st, _, env := newFlakyDispatcher(t, tc.fails)
			if err := d.WriterHook().AfterCommit(context.Background(), []core.Envelope{env}); err == nil {
				t.Fatal("AfterCommit hid a failed release")
			}
			st.waitRelease(t)
			err := d.Close(context.Background())
			if ids := st.waitRelease(t); !slices.Equal(ids, []string{"later"}) {
				t.Errorf("Close released %v, want [later]", ids)
			}
			locked := st.get(t, "later").LockedBy
			switch {
			case tc.wantErr && (err == nil || !strings.Contains(err.Error(), "on shutdown")):
				t.Errorf("Close = %v, want the failed release on shutdown", err)
			case !tc.wantErr && err != nil:
				t.Errorf("Close = %v", err)
			case !tc.wantErr && locked != "":
				t.Errorf("after Close the row is locked by %q, want released", locked)
			}
		})
	}
}
