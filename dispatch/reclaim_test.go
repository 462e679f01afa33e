package dispatch_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
)

// claimAfterRetryStore plays this dispatcher's own poller claiming a failed
// event the moment its RETRY is written, before the worker that wrote it has
// moved on: MarkRetry hands the claimed row to the dispatcher's cold queue
// before it returns.
type claimAfterRetryStore struct {
	*memStore
	d     *dispatch.Dispatcher
	once  sync.Once
	taken chan bool // what EnqueueCold returned
}

func (s *claimAfterRetryStore) MarkRetry(ctx context.Context, db core.DBTX, owner, id string, next time.Time, lastErr string) (bool, error) {
	ok, err := s.memStore.MarkRetry(ctx, db, owner, id, next, lastErr)
	s.once.Do(func() {
		ev, gerr := s.Get(ctx, db, id)
		if gerr != nil {
			panic(gerr)
		}
		ev.LockedBy, ev.LockedAt = owner, next // the claim's fresh lease
		s.taken <- s.d.EnqueueCold(ev)
	})
	return ok, err
}

// A RETRY write makes the row claimable again: when this dispatcher's own
// poller claims it at once, the event must be queued for its next attempt,
// not taken for one the dispatcher still holds (and then dropped, leased,
// until the lease expires).
func TestClaimRightAfterRetryIsDelivered(t *testing.T) {
	t.Parallel()
	st := &claimAfterRetryStore{memStore: newMemStore(), taken: make(chan bool, 1)}
	calls := make(chan int, 10)
	n := 0
	reg := core.NewRegistry()
	if err := reg.RegisterFunc(orders, orderPlaced, func(context.Context, core.Event) error {
		n++
		calls <- n
		if n == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	d, err := dispatch.New(dispatch.Config{
		Store: st, DB: nopDB{}, Registry: reg, Owner: testOwner, Workers: 1,
		Retry: fixedDelay{}, Now: func() time.Time { return t0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	st.d = d
	env := newEnv(t, "ev-1")
	if err := st.Insert(context.Background(), nil, []core.Envelope{env}, core.InsertOptions{LeaseOwner: testOwner, LeaseAt: t0}); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close(context.Background()) })
	if !d.EnqueueHot(core.Event{Envelope: env, Status: core.StatusNew, LockedBy: testOwner, LockedAt: t0}) {
		t.Fatal("hot queue refused the event")
	}
	if taken := <-st.taken; !taken {
		t.Error("EnqueueCold refused the claimed event; the poller would release it")
	}
	for want := 1; want <= 2; want++ {
		select {
		case got := <-calls:
			if got != want {
				t.Fatalf("listener call %d, want %d", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("attempt %d never came: the claimed event was dropped", want)
		}
	}
}
