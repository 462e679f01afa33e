// Package lifecycle is the Start/Close shape shared by the library's
// background components, so that each behaves the same way. Loop runs one
// goroutine (poller, purger, metrics sampler); Staged runs a component whose
// shutdown has stages (the dispatcher, the Outbox: stop intake, drain with a
// timeout, hard stop, final step). Both share these rules, checked in one
// place (guard.go):
//
//   - Start launches the goroutines and returns at once; a second Start
//     returns core.ErrAlreadyStarted and a Start after Close returns
//     core.ErrClosed.
//   - Close, or cancelling Start's context, asks the component to stop: it
//     finishes the work in progress and returns. Close waits for that; if its
//     own context ends first, Close cancels the work's context and still
//     waits, so no goroutine outlives it. Close is idempotent and safe to call
//     concurrently.
package lifecycle

import (
	"context"
	"sync"
)

// Loop owns one background goroutine. The zero value is ready to use.
type Loop struct {
	guard    guard
	mu       sync.Mutex    // guards the lazy init of stop and done
	stop     chan struct{} // closed when stopping is requested
	done     chan struct{} // closed when the goroutine has returned
	cancel   context.CancelFunc
	stopOnce sync.Once
}

func (l *Loop) init() {
	l.mu.Lock()
	defer l.mu.Unlock()
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
	l.init()
	return l.guard.start(func() error {
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
	})
}

func (l *Loop) signalStop() { l.stopOnce.Do(func() { close(l.stop) }) }

// Close asks the loop to stop and waits until its goroutine has returned. If
// ctx ends first, it cancels the work context and keeps waiting. It always
// returns nil; the error result keeps the shape of the components' Close.
func (l *Loop) Close(ctx context.Context) error {
	l.init()
	started := l.guard.close()
	l.signalStop()
	if !started {
		return nil
	}
	select {
	case <-l.done:
	case <-ctx.Done():
		l.cancel() // written by Start before started was set
		<-l.done
	}
	return nil
}

// Closed reports whether Close has been called.
func (l *Loop) Closed() bool { return l.guard.isClosed() }

// Done returns a channel closed when the goroutine has returned; it is never
// closed for a loop that was not started.
func (l *Loop) Done() <-chan struct{} {
	l.init()
	return l.done
}
