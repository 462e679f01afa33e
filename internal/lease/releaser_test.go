package lease

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// fakeStore fails its first fails Release calls and records every call.
type fakeStore struct {
	mu    sync.Mutex
	fails int
	calls []Group
}

func (s *fakeStore) release(_ context.Context, owner string, ids []string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, Group{Owner: owner, IDs: slices.Clone(ids)})
	if s.fails > 0 {
		s.fails--
		return errors.New("connection reset by peer")
	}
	return nil
}

func (s *fakeStore) got() []Group {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func TestByOwner(t *testing.T) {
	t.Parallel()
	ls := []Lease{{"1", "a"}, {"2", "b"}, {"3", "a"}, {"4", "b"}, {"5", "c"}}
	got := ByOwner(ls, func(id string) bool { return id == "4" })
	want := []Group{{"a", []string{"1", "3"}}, {"b", []string{"2"}}, {"c", []string{"5"}}}
	if !slices.EqualFunc(got, want, func(x, y Group) bool { return x.Owner == y.Owner && slices.Equal(x.IDs, y.IDs) }) {
		t.Errorf("ByOwner = %v, want %v", got, want)
	}
}

// The dispatcher's policy: retried in the background until it lands,
// skipping ids held again, one call per owner, Released run after.
func TestReleaserBackgroundRetry(t *testing.T) {
	t.Parallel()
	st := &fakeStore{fails: 2}
	released := make(chan struct{}, 10)
	r := New(Policy{
		Release:  st.release,
		Skip:     func(id string) bool { return id == "held" },
		Released: func() { released <- struct{}{} },
	})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); r.Run(context.Background(), stop) }()
	r.Keep("me", []string{"1", "held", "2"}, time.Time{})
	r.Keep("me", []string{"1"}, time.Time{}) // kept once
	select {
	case <-released:
	case <-time.After(10 * time.Second):
		t.Fatal("no release within 10s")
	}
	close(stop)
	<-done
	calls := st.got()
	if len(calls) != 3 {
		t.Fatalf("%d Release calls, want 3 (two failures, one success): %v", len(calls), calls)
	}
	for _, c := range calls {
		if c.Owner != "me" || !slices.Equal(c.IDs, []string{"1", "2"}) {
			t.Errorf("Release(%s, %v), want me [1 2]", c.Owner, c.IDs)
		}
	}
	if r.Len() != 0 {
		t.Errorf("%d leases kept after the release landed", r.Len())
	}
}

// The poller's policy: retried on demand, kept while it fails, given up once
// the oldest lease is GiveUpAfter old.
func TestReleaserGivesUp(t *testing.T) {
	t.Parallel()
	st := &fakeStore{fails: 100}
	now := time.Unix(1000, 0)
	r := New(Policy{Release: st.release, GiveUpAfter: time.Minute, Now: func() time.Time { return now }})
	r.Keep("p", []string{"1"}, now)
	r.Keep("p", []string{"2"}, now.Add(-30*time.Second)) // the oldest sets the clock
	if err := r.Retry(context.Background()); err == nil {
		t.Fatal("Retry = nil, want the release error")
	}
	if r.Len() != 2 {
		t.Fatalf("%d kept after a failed retry, want 2", r.Len())
	}
	now = now.Add(30 * time.Second)
	if err := r.Retry(context.Background()); err != nil {
		t.Fatalf("Retry after GiveUpAfter = %v, want nil (given up)", err)
	}
	if n := len(st.got()); n != 1 {
		t.Errorf("%d Release calls, want 1: none once given up", n)
	}
	if r.Len() != 0 {
		t.Errorf("%d kept after giving up", r.Len())
	}
}

func TestReleaserBounded(t *testing.T) {
	t.Parallel()
	r := New(Policy{Release: (&fakeStore{}).release})
	ids := make([]string, MaxKept+10)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	r.Keep("o", ids, time.Time{})
	if r.Len() != MaxKept {
		t.Errorf("%d kept, want MaxKept", r.Len())
	}
}
