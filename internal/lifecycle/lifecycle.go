// Package lifecycle is the Start/Close shape shared by the library's
// background loops (poller, purger, metrics sampler), so that each behaves the
// same way:
//
//   - Start launches one goroutine and returns at once; a second Start returns
//     core.ErrAlreadyStarted and a Start after Close returns core.ErrClosed.
//   - Close, or cancelling Start's context, asks the loop to stop: the loop
//     finishes the step in progress and returns. Close waits for that; if its
//     own context ends first, Close cancels the step's context and still waits,
//     so no goroutine outlives it. Close is idempotent and safe to call
//     concurrently.
package lifecycle

import (
	"context"
	"sync"

	"github.com/outboxkit/outbox/core"
)

// Loop owns one background goroutine. The zero value is ready to use.
type Loop struct {
	mu       sync.Mutex
	started  bool
	closed   bool
	stop     chan struct{} // closed when stopping is requested
	done     chan struct{} // closed when the goroutine has returned
	cancel   context.CancelFunc
	stopOnce sync.Once
}

func (l *Loop) init() {
	if l.stop == nil {
		l.stop = make(chan struct{})
		l.done = make(chan struct{})
	}
}

// Start runs fn on a new goroutine. fn gets a work context, which keeps ctx's
// values and is cancelled only when Close gives up waiting, and a stop
// channel, closed when Close is called or ctx is done; fn must return soon
// after stop is closed.
func (l *Loop) Start(ctx context.Context, fn func(work context.Context, stop <-chan struct{})) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.closed:
		return core.ErrClosed
	case l.started:
		return core.ErrAlreadyStarted
	}
	l.init()
	l.started = true
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel = cancel
	unwatch := context.AfterFunc(ctx, l.signalStop)
	go func() {
		defer close(l.done)
		defer cancel()
		defer unwatch()
		fn(work, l.stop)
	}()
	return nil
}

func (l *Loop) signalStop() { l.stopOnce.Do(func() { close(l.stop) }) }

// Close asks the loop to stop and waits until its goroutine has returned. If
// ctx ends first, it cancels the work context and keeps waiting. It always
// returns nil; the error result keeps the shape of the components' Close.
func (l *Loop) Close(ctx context.Context) error {
	l.mu.Lock()
	l.init()
	l.closed = true
	started, cancel := l.started, l.cancel
	l.mu.Unlock()
	l.signalStop()
	if !started {
		return nil
	}
	select {
	case <-l.done:
	case <-ctx.Done():
		cancel()
		<-l.done
	}
	return nil
}

// Closed reports whether Close has been called.
func (l *Loop) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Done returns a channel closed when the goroutine has returned; it is never
// closed for a loop that was not started.
func (l *Loop) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.init()
	return l.done
}
