// Package txhooks holds the callbacks of one transaction for the
// transactions that carry outbox writes (package txctx for database/sql,
// and the ORM integrations): registered while the transaction is active,
// then run once, in registration order, when it ends, each on its own so
// that a panic is logged and the others still run.
package txhooks

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/outboxkit/outbox/outboxlog"
)

// State is where a transaction is in its life.
type State uint8

const (
	Active State = iota
	Committed
	RolledBack
)

func (s State) String() string {
	switch s {
	case Active:
		return "active"
	case Committed:
		return "committed"
	default:
		return "rolled back"
	}
}

// Hooks is the callback set of one transaction. Its zero value is an active
// transaction with no callbacks that logs to outboxlog.Default(); it is
// safe for concurrent use.
type Hooks struct {
	// Log receives late registrations (warn) and callback panics (error).
	// Nil: outboxlog.Default().
	Log *slog.Logger
	// Prefix starts each log message, e.g. "txctx".
	Prefix string

	mu            sync.Mutex
	state         State
	afterCommit   []func(context.Context)
	afterRollback []func(context.Context)
	// The first callbacks of each list live here, so that a transaction
	// with few (a write registers one of each) allocates no list.
	commitBuf, rollbackBuf [2]func(context.Context)
}

// AfterCommit registers fn to run once after a successful COMMIT. On an
// ended transaction fn never runs and the registration is logged. A nil fn
// is ignored.
func (h *Hooks) AfterCommit(fn func(ctx context.Context)) {
	h.register("AfterCommit", &h.afterCommit, h.commitBuf[:0], fn)
}

// AfterRollback registers fn to run once after a rollback or a failed
// COMMIT. On an ended transaction fn never runs and the registration is
// logged. A nil fn is ignored.
func (h *Hooks) AfterRollback(fn func(ctx context.Context)) {
	h.register("AfterRollback", &h.afterRollback, h.rollbackBuf[:0], fn)
}

// register appends fn to list, which starts on buf.
func (h *Hooks) register(method string, list *[]func(context.Context), buf []func(context.Context), fn func(context.Context)) {
	if fn == nil {
		return
	}
	h.mu.Lock()
	state := h.state
	if state == Active {
		if *list == nil {
			*list = buf
		}
		*list = append(*list, fn)
	}
	h.mu.Unlock()
	if state != Active {
		outboxlog.Or(h.Log).LogAttrs(context.Background(), slog.LevelWarn,
			h.Prefix+": callback registered on an ended transaction is dropped",
			slog.String("method", method), slog.String("state", state.String()))
	}
}

// State returns the transaction's state.
func (h *Hooks) State() State {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// Ended reports whether the transaction has committed or rolled back.
func (h *Hooks) Ended() bool { return h.State() != Active }

// Finish marks the transaction ended and runs the callbacks of its outcome
// with ctx: the after-commit ones when committed, the after-rollback ones
// otherwise. Only the first call does anything.
func (h *Hooks) Finish(ctx context.Context, committed bool) {
	h.mu.Lock()
	if h.state != Active {
		h.mu.Unlock()
		return
	}
	run, stage := h.afterRollback, "after rollback"
	h.state = RolledBack
	if committed {
		run, stage = h.afterCommit, "after commit"
		h.state = Committed
	}
	h.afterCommit, h.afterRollback = nil, nil
	h.mu.Unlock()
	for i, fn := range run {
		h.call(ctx, stage, i, fn)
	}
	// Let the callbacks' closures go (run may share the inline buffers).
	clear(h.commitBuf[:])
	clear(h.rollbackBuf[:])
}

// call runs one callback; a panic is logged so that the others still run.
func (h *Hooks) call(ctx context.Context, stage string, i int, fn func(context.Context)) {
	defer func() {
		if r := recover(); r != nil {
			outboxlog.Or(h.Log).LogAttrs(ctx, slog.LevelError, h.Prefix+": transaction callback panicked",
				slog.String("stage", stage), slog.Int("callback", i),
				outboxlog.Err(fmt.Errorf("panic: %v", r)), slog.String("stack", string(debug.Stack())))
		}
	}()
	fn(ctx)
}
