package lifecycle

import (
	"sync"

	"github.com/outboxkit/outbox/core"
)

// guard holds the started and closed flags every lifecycle of the library
// checks the same way: a second Start is core.ErrAlreadyStarted, a Start
// after Close is core.ErrClosed.
type guard struct {
	mu      sync.Mutex
	started bool
	closed  bool
}

// start runs launch, under the guard's lock, if Start is allowed. When
// launch fails the guard counts as closed and never started: nothing runs,
// and a later Start returns core.ErrClosed.
func (g *guard) start(launch func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.closed:
		return core.ErrClosed
	case g.started:
		return core.ErrAlreadyStarted
	}
	if err := launch(); err != nil {
		g.closed = true
		return err
	}
	g.started = true
	return nil
}

// close marks the guard closed and reports whether Start had succeeded; after
// it returns, no Start succeeds.
func (g *guard) close() (started bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	return g.started
}

// isClosed reports whether close was called.
func (g *guard) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}
