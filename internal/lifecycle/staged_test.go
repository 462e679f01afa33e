package lifecycle

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// recorder records the stages a Staged runs, in order.
type recorder struct {
	mu    sync.Mutex
	steps []string
}

func (r *recorder) add(step string) {
	r.mu.Lock()
	r.steps = append(r.steps, step)
	r.mu.Unlock()
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.steps)
}

// newWorker returns a Staged whose one worker, launched by start, runs until
// stopping (or, with busy, until the hard stop), and the recorder of its
// stages.
func newWorker(t *testing.T, busy bool, drainTimeout time.Duration) (*Staged, func(context.Context) error, *recorder) {
	t.Helper()
	rec := &recorder{}
	var (
		s  *Staged
		wg sync.WaitGroup
	)
	s = NewStaged(Stages{
		StopIntake:    func() { rec.add("stop intake") },
		Drain:         wg.Wait,
		DrainTimeout:  drainTimeout,
		DrainTimedOut: func() { rec.add("drain timed out") },
		AfterHardStop: func() { rec.add("after hard stop") },
		Final:         func(context.Context) error { rec.add("final"); return errors.New("final error") },
	})
	start := func(ctx context.Context) error {
		return s.Start(ctx, func(work context.Context) error {
			wg.Go(func() {
				if busy {
					<-work.Done() // a listener that runs until cancelled
					return
				}
				<-s.Stopping()
			})
			return nil
		})
	}
	return s, start, rec
}

func TestStagedOrder(t *testing.T) {
	s, start, rec := newWorker(t, false, time.Hour)
	if err := start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := start(context.Background()); !errors.Is(err, core.ErrAlreadyStarted) {
		t.Fatalf("second Start = %v, want ErrAlreadyStarted", err)
	}
	if err := s.Close(context.Background()); err == nil || err.Error() != "final error" {
		t.Fatalf("Close = %v, want Final's error", err)
	}
	if err := s.Close(context.Background()); err == nil || err.Error() != "final error" {
		t.Fatalf("second Close = %v, want Final's error again", err)
	}
	if want := []string{"stop intake", "after hard stop", "final"}; !slices.Equal(rec.got(), want) {
		t.Errorf("stages %v, want %v", rec.got(), want)
	}
	if err := start(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}
}

func TestStagedDrainTimeout(t *testing.T) {
	s, start, rec := newWorker(t, true, 10*time.Millisecond)
	if err := start(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = s.Close(context.Background())
	if want := []string{"stop intake", "drain timed out", "after hard stop", "final"}; !slices.Equal(rec.got(), want) {
		t.Errorf("stages %v, want %v", rec.got(), want)
	}
}

// Close's context ending cuts the drain short, and Final's context is
// cancelled.
func TestStagedCloseContextEnds(t *testing.T) {
	var finalCtx context.Context
	var wg sync.WaitGroup
	s := NewStaged(Stages{
		Drain: wg.Wait,
		Final: func(ctx context.Context) error { <-ctx.Done(); finalCtx = ctx; return nil },
	})
	err := s.Start(context.Background(), func(work context.Context) error {
		wg.Go(func() { <-work.Done() })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if finalCtx == nil || finalCtx.Err() == nil {
		t.Error("Final's context not cancelled when Close's ended")
	}
}

// Cancelling Start's context shuts down as Close does.
func TestStagedStartContextCancelled(t *testing.T) {
	s, start, rec := newWorker(t, false, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	if err := start(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("no shutdown within 10s of cancelling Start's context")
	}
	if want := []string{"stop intake", "after hard stop", "final"}; !slices.Equal(rec.got(), want) {
		t.Errorf("stages %v, want %v", rec.got(), want)
	}
	if err := s.Close(context.Background()); err == nil {
		t.Error("Close after the shutdown lost Final's error")
	}
}

func TestStagedCloseWithoutStart(t *testing.T) {
	s, start, rec := newWorker(t, false, time.Hour)
	if err := s.Close(context.Background()); err == nil {
		t.Fatal("Close = nil, want Final's error")
	}
	if want := []string{"stop intake", "final"}; !slices.Equal(rec.got(), want) {
		t.Errorf("stages %v, want %v", rec.got(), want)
	}
	if err := start(context.Background()); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}
}

func TestStagedLaunchFails(t *testing.T) {
	finals := 0
	s := NewStaged(Stages{Final: func(context.Context) error { finals++; return nil }})
	boom := errors.New("boom")
	if err := s.Start(context.Background(), func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("Start = %v, want the launch error", err)
	}
	if err := s.Start(context.Background(), func(context.Context) error { return nil }); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Start after a failed Start = %v, want ErrClosed", err)
	}
	_ = s.Close(context.Background())
	if finals != 1 {
		t.Errorf("Final ran %d times, want 1", finals)
	}
}

// Start and Close race from many goroutines: every Close returns the same
// error once the shutdown is over, Final runs once, and no goroutine
// outlives it (TestMain checks for leaks).
func TestStagedStartCloseStress(t *testing.T) {
	for range 200 {
		var finals int
		var mu sync.Mutex
		var wg sync.WaitGroup
		s := NewStaged(Stages{
			Drain: wg.Wait,
			Final: func(context.Context) error { mu.Lock(); finals++; mu.Unlock(); return nil },
		})
		ctx, cancel := context.WithCancel(context.Background())
		var callers sync.WaitGroup
		for i := range 8 {
			callers.Go(func() {
				switch i % 3 {
				case 0:
					_ = s.Start(ctx, func(work context.Context) error {
						wg.Go(func() { <-s.Stopping() })
						return nil
					})
				case 1:
					if err := s.Close(context.Background()); err != nil {
						t.Error(err)
					}
				default:
					cancel()
				}
			})
		}
		callers.Wait()
		if err := s.Close(context.Background()); err != nil {
			t.Error(err)
		}
		cancel()
		if finals != 1 {
			t.Fatalf("Final ran %d times, want 1", finals)
		}
	}
}
