// Package logging picks the logger each component writes to: the
// *slog.Logger of its Config when set, else its zerolog.Logger when that
// has a writer, else the default, which sends warnings and errors to
// log/slog's default logger (stderr unless the program changed it). The
// components log through zerolog; a *slog.Logger is reached through a
// zerolog.Logger whose writer hands each entry to the slog.Handler as a
// record with the same message, level and fields.
package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"time"

	"github.com/rs/zerolog"
)

// Resolve returns the logger of a component configured with zl and sl: sl
// when it is not nil, else zl when it has a writer (HasWriter), else
// Default().
func Resolve(zl zerolog.Logger, sl *slog.Logger) zerolog.Logger {
	switch {
	case sl != nil:
		return FromSlog(sl.Handler())
	case HasWriter(zl):
		return zl
	}
	return Default()
}

// Set reports whether a component's logger is configured: sl is not nil or
// zl has a writer.
func Set(zl zerolog.Logger, sl *slog.Logger) bool { return sl != nil || HasWriter(zl) }

// Default returns the logger of components configured with neither
// logger: warnings and errors go to slog.Default() (looked up at each
// entry, so slog.SetDefault applies at once); debug and info entries are
// dropped.
func Default() zerolog.Logger {
	return FromSlog(minLevel{slog.LevelWarn})
}

// minLevel is slog.Default()'s handler with entries below level dropped.
type minLevel struct{ level slog.Level }

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.level && slog.Default().Handler().Enabled(ctx, l)
}

func (m minLevel) Handle(ctx context.Context, r slog.Record) error {
	return slog.Default().Handler().Handle(ctx, r)
}

// WithAttrs and WithGroup are not reached: FromSlog passes every field in
// the record.
func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return slog.Default().Handler().WithAttrs(as)
}
func (m minLevel) WithGroup(name string) slog.Handler {
	return slog.Default().Handler().WithGroup(name)
}

// FromSlog returns a zerolog.Logger that hands every entry to h: the
// message, the level (trace and debug become slog.LevelDebug, fatal and
// panic slog.LevelError) and each field as an attribute, in order. An entry
// h is not Enabled for is dropped before zerolog encodes it.
func FromSlog(h slog.Handler) zerolog.Logger {
	return zerolog.New(slogWriter{h}).Level(zerolog.TraceLevel).Sample(slogSampler{h})
}

func slogLevel(l zerolog.Level) slog.Level {
	switch {
	case l <= zerolog.DebugLevel:
		return slog.LevelDebug
	case l == zerolog.InfoLevel:
		return slog.LevelInfo
	case l == zerolog.WarnLevel:
		return slog.LevelWarn
	case l == zerolog.NoLevel:
		return slog.LevelInfo
	}
	return slog.LevelError
}

// slogSampler asks the handler whether it wants an entry of that level
// before zerolog builds it.
type slogSampler struct{ h slog.Handler }

func (s slogSampler) Sample(l zerolog.Level) bool {
	return s.h.Enabled(context.Background(), slogLevel(l))
}

// slogWriter turns zerolog's JSON entries into slog records.
type slogWriter struct{ h slog.Handler }

var _ zerolog.LevelWriter = slogWriter{}

func (w slogWriter) Write(p []byte) (int, error) { return w.WriteLevel(zerolog.NoLevel, p) }

func (w slogWriter) WriteLevel(l zerolog.Level, p []byte) (int, error) {
	level := slogLevel(l)
	if !w.h.Enabled(context.Background(), level) {
		// Reached only with zerolog's sampling disabled globally.
		return len(p), nil
	}
	msg, attrs, err := decode(p)
	if err != nil {
		// Not JSON (a zerolog writer wrapper, say): pass the text on.
		msg, attrs = string(bytes.TrimSpace(p)), nil
	}
	r := slog.NewRecord(time.Now(), level, msg, 0)
	r.AddAttrs(attrs...)
	if err := w.h.Handle(context.Background(), r); err != nil {
		return 0, err
	}
	return len(p), nil
}

// decode reads one JSON object of zerolog's and returns its message and
// its other fields, in order; the level field is left out (the record has
// it).
func decode(p []byte) (msg string, attrs []slog.Attr, err error) {
	dec := json.NewDecoder(bytes.NewReader(p))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // {
		return "", nil, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", nil, err
		}
		key, _ := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			return "", nil, err
		}
		switch key {
		case zerolog.MessageFieldName:
			msg, _ = v.(string)
			continue
		case zerolog.LevelFieldName:
			continue
		}
		attrs = append(attrs, attr(key, v))
	}
	if _, err := dec.Token(); err != nil && err != io.EOF { // }
		return "", nil, err
	}
	return msg, attrs, nil
}

func attr(key string, v any) slog.Attr {
	switch x := v.(type) {
	case string:
		return slog.String(key, x)
	case bool:
		return slog.Bool(key, x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return slog.Int64(key, i)
		}
		if f, err := x.Float64(); err == nil {
			return slog.Float64(key, f)
		}
		return slog.String(key, x.String())
	}
	return slog.Any(key, v)
}

// HasWriter reports whether l writes anywhere, i.e. whether it was built by
// zerolog.New (or derived from such a logger) rather than being the zero
// Logger, which has no writer and is silent. zerolog does not expose the
// writer, so HasWriter asks a copy of l to start an event with a sampler
// that records whether it was consulted and refuses: zerolog consults the
// sampler only after it has found a writer (and a level that lets the event
// through, which the copy's Trace level always does), and nothing is
// written. A zero Logger given context with With stays without a writer and
// counts as unset. zerolog.Nop() has a writer (io.Discard): it counts as
// set, and silences. While zerolog's global level is Disabled every logger
// is silent and HasWriter reports false.
func HasWriter(l zerolog.Logger) bool {
	var s probe
	probeLogger := l.Level(zerolog.TraceLevel).Sample(&s)
	if e := probeLogger.Log(); e != nil {
		// Sampling is disabled globally: the event was started, which only
		// a logger with a writer does. Drop it unsent.
		e.Discard()
		return true
	}
	return s.asked
}

// probe is a zerolog.Sampler that records that it was asked and drops the
// event.
type probe struct{ asked bool }

func (p *probe) Sample(zerolog.Level) bool {
	p.asked = true
	return false
}
