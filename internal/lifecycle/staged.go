package lifecycle

import (
	"context"
	"sync"
	"time"
)

// Stages are the steps of a staged shutdown, in the order they run. Every
// field is optional.
type Stages struct {
	// StopIntake runs first, once, when shutdown begins (Close, or the end
	// of Start's context): once it returns the component accepts no new
	// work. Then the channel of Staged.Stopping closes.
	StopIntake func()
	// Drain waits until the work accepted before intake stopped is done,
	// for up to DrainTimeout or until Close's context ends, whichever comes
	// first. It runs on a goroutine of its own and must return soon after
	// the hard stop. Nil: no drain, the hard stop follows at once.
	Drain func()
	// DrainTimeout bounds the drain; zero or negative: only Close's context
	// bounds it.
	DrainTimeout time.Duration
	// DrainTimedOut, when set, runs when DrainTimeout cut the drain short,
	// for a log line.
	DrainTimedOut func()
	// AfterHardStop runs once the hard stop is over (Staged.HardStop closed,
	// the work context cancelled, Drain returned): it waits for what runs
	// until the hard stop and flushes what the work left behind. It runs
	// only if Start succeeded.
	AfterHardStop func()
	// Final runs last, exactly once, whether Start ran or not; its error is
	// what every Close returns. Its context is Close's when the component
	// never started; otherwise it carries Start's values and is cancelled
	// when the hard stop comes from Close's context ending.
	Final func(ctx context.Context) error
}

// Staged runs a component with a staged shutdown: stop intake, drain with a
// timeout (or until Close's context ends), hard stop, final step.
//
//   - Start launches the component and returns at once; a second Start
//     returns core.ErrAlreadyStarted and a Start after Close returns
//     core.ErrClosed.
//   - Close, or the end of Start's context, begins the shutdown: StopIntake
//     runs and Stopping closes; Drain then has up to DrainTimeout. The hard
//     stop follows: HardStop closes and the work context is cancelled, at
//     once if Close's context ends first. AfterHardStop and Final run last.
//   - Close waits for all of it, so no goroutine of the component outlives
//     it, and returns Final's error. Close is idempotent and safe to call
//     concurrently; every call waits and returns the same error.
//
// A Staged must be made with NewStaged.
type Staged struct {
	st    Stages
	guard guard

	stopping, hard, done             chan struct{}
	stoppingOnce, hardOnce, doneOnce sync.Once
	err                              error // Final's; written before done is closed

	// aborted is cancelled when a Close's context ends before the shutdown
	// is over: Final's context follows it.
	aborted context.Context
	abort   context.CancelFunc
}

// NewStaged returns a Staged that shuts down through st.
func NewStaged(st Stages) *Staged {
	aborted, abort := context.WithCancel(context.Background())
	return &Staged{
		st:       st,
		aborted:  aborted,
		abort:    abort,
		stopping: make(chan struct{}),
		hard:     make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// Stopping returns a channel closed once intake has stopped: workers drain
// what is left and exit.
func (s *Staged) Stopping() <-chan struct{} { return s.stopping }

// HardStop returns a channel closed at the hard stop: workers stop taking
// work at once.
func (s *Staged) HardStop() <-chan struct{} { return s.hard }

// Start runs launch, which starts the component's goroutines on work, a
// context that keeps ctx's values and is cancelled only at the hard stop. If
// launch fails, nothing must run: the component counts as closed (a later
// Start returns core.ErrClosed, Close runs Final) and the error is
// returned.
func (s *Staged) Start(ctx context.Context, launch func(work context.Context) error) error {
	return s.guard.start(func() error {
		work, cancel := context.WithCancel(context.WithoutCancel(ctx))
		if err := launch(work); err != nil {
			cancel()
			return err
		}
		go s.supervise(ctx, work, cancel) // owned through s.done, which it closes last
		return nil
	})
}

// Close shuts the component down through its stages and returns Final's
// error. When ctx ends first, the hard stop comes at once, and Close still
// waits for the remaining stages.
func (s *Staged) Close(ctx context.Context) error {
	started := s.guard.close()
	s.stopIntake()
	if !started {
		// No goroutine runs: the last step is Close's own. Concurrent
		// callers wait below until it is done.
		s.finish(ctx)
	}
	select {
	case <-s.done:
	case <-ctx.Done():
		s.abort()
		s.stopHard()
		<-s.done
	}
	return s.err
}

func (s *Staged) stopIntake() {
	s.stoppingOnce.Do(func() {
		if s.st.StopIntake != nil {
			s.st.StopIntake()
		}
		close(s.stopping)
	})
}

func (s *Staged) stopHard() { s.hardOnce.Do(func() { close(s.hard) }) }

// supervise waits for the shutdown to begin, then runs it.
func (s *Staged) supervise(startCtx, work context.Context, cancelWork context.CancelFunc) {
	select {
	case <-startCtx.Done():
		s.stopIntake()
	case <-s.stopping:
	}
	drained := make(chan struct{})
	go func() { // owned: supervise waits on drained below
		defer close(drained)
		if s.st.Drain != nil {
			s.st.Drain()
		}
	}()
	var timeout <-chan time.Time
	if s.st.DrainTimeout > 0 {
		timer := time.NewTimer(s.st.DrainTimeout)
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case <-drained:
	case <-timeout:
		if s.st.DrainTimedOut != nil {
			s.st.DrainTimedOut()
		}
	case <-s.hard:
	}
	// Workers stop taking work; whatever still runs on work sees it
	// cancelled (after a complete drain nothing does).
	s.stopHard()
	cancelWork()
	<-drained
	if s.st.AfterHardStop != nil {
		s.st.AfterHardStop()
	}
	// Final's context: Start's values, cancelled if a Close's context ends.
	fctx, cancel := context.WithCancel(context.WithoutCancel(work))
	defer cancel()
	defer context.AfterFunc(s.aborted, cancel)()
	s.finish(fctx)
}

// finish runs Final once and marks the shutdown done.
func (s *Staged) finish(ctx context.Context) {
	s.doneOnce.Do(func() {
		if s.st.Final != nil {
			s.err = s.st.Final(ctx)
		}
		close(s.done)
	})
}
