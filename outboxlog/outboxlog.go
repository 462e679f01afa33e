// Package outboxlog is the logging vocabulary of the outbox library and of
// its nested modules (brokers, ORM integrations): every component that logs
// takes one option, Logger *slog.Logger, in its Config, and logs through
// log/slog with the context of the call, so that a handler sees the
// request's values (trace ids, say).
//
// A nil Logger means Default: warnings and errors go to slog.Default(),
// looked up at each record, so slog.SetDefault applies at once; debug and
// info records are dropped. Nothing in the library is silent by default.
// To silence a component, give it slog.New(slog.DiscardHandler).
//
// zerolog users keep their logger through zerolog's own slog bridge:
//
//	Logger: slog.New(zerolog.NewSlogHandler(zl))
//
// Records reach zerolog field by field; nothing is encoded twice.
//
// Warnings that come in bursts (the hot queue refusing events, a consumer's
// handler failing on every message) go through a Sum, which writes one line
// per kind and second with the counts added up.
package outboxlog

import (
	"context"
	"log/slog"
	"sync/atomic"
)

// Or returns l, or Default() when l is nil: what a component logs to.
func Or(l *slog.Logger) *slog.Logger {
	if l == nil {
		return Default()
	}
	return l
}

// defaultLogger is Default's logger: it holds no state of its own.
var defaultLogger = slog.New(&defaultHandler{})

// Default returns the logger of a component configured without one:
// records at slog.LevelWarn and above go to slog.Default(), looked up at
// each record (so slog.SetDefault applies at once); records below are
// dropped.
func Default() *slog.Logger { return defaultLogger }

// Err is the attribute of an error, under the key "error" that every
// component uses.
func Err(err error) slog.Attr { return slog.Any("error", err) }

// defaultHandler passes records at warn and above to slog.Default()'s
// handler, with the attributes and groups given to it by WithAttrs and
// WithGroup applied to that handler. The derived handler is kept for the
// default logger it was derived from, and derived again when
// slog.SetDefault replaced it.
type defaultHandler struct {
	ops    []op // WithAttrs and WithGroup calls, in order
	cached atomic.Pointer[derived]
}

type op struct {
	attrs []slog.Attr
	group string
}

type derived struct {
	from *slog.Logger
	h    slog.Handler
}

func (d *defaultHandler) handler() slog.Handler {
	def := slog.Default()
	if len(d.ops) == 0 {
		return def.Handler()
	}
	if c := d.cached.Load(); c != nil && c.from == def {
		return c.h
	}
	h := def.Handler()
	for _, o := range d.ops {
		if o.attrs != nil {
			h = h.WithAttrs(o.attrs)
		} else {
			h = h.WithGroup(o.group)
		}
	}
	d.cached.Store(&derived{from: def, h: h})
	return h
}

func (d *defaultHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && slog.Default().Handler().Enabled(ctx, l)
}

func (d *defaultHandler) Handle(ctx context.Context, r slog.Record) error {
	return d.handler().Handle(ctx, r)
}

func (d *defaultHandler) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return d
	}
	return d.with(op{attrs: as})
}

func (d *defaultHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return d
	}
	return d.with(op{group: name})
}

func (d *defaultHandler) with(o op) *defaultHandler {
	ops := make([]op, len(d.ops), len(d.ops)+1)
	copy(ops, d.ops)
	return &defaultHandler{ops: append(ops, o)}
}
