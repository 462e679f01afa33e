package outboxlog

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultWindow is how long a Sum adds up records before it writes them as
// one line.
const DefaultWindow = time.Second

// Clock is the time a Sum reads and waits on. Tests give a Sum a clock
// whose timers they fire; nil means the real time.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once d has passed, in its own goroutine, unless
	// the returned stop is called first (stop reports whether it was).
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) AfterFunc(d time.Duration, f func()) func() bool {
	return time.AfterFunc(d, f).Stop
}

// Sum writes the records of one kind of warning (one message, one level)
// at most once per window: the first record of a window opens it, those
// that follow within it are added up, and when the window closes one
// record is written with the time and context of the window's first
// record, the message, the count under the Sum's key, the attributes of the
// first record and, when it summed more than one record,
// summed_over=<window>. For example 33 refusals of the hot
// queue within a second give one line:
//
//	WARN outbox hot queue refused events; left for the poller events=33 first_event_id=... summed_over=1s
//
// A Sum whose logger drops its level costs one Enabled call per Add. Call
// Flush when the component stops, to write what is pending. A Sum is safe
// for concurrent use.
type Sum struct {
	log    *slog.Logger
	level  slog.Level
	msg    string
	key    string
	window time.Duration
	clock  Clock

	mu      sync.Mutex
	open    bool
	gen     uint64 // the window's number: a timer of a window already flushed does nothing
	ctx     context.Context
	first   time.Time
	attrs   []slog.Attr
	count   int64
	records int
	stop    func() bool
}

// SumOptions tune a Sum; the zero value is the defaults.
type SumOptions struct {
	// Window is how long records are added up. Default DefaultWindow.
	Window time.Duration
	// Clock is the time the Sum reads and waits on. Default: the real time.
	Clock Clock
}

// NewSum returns a Sum of the records of message msg at level on log (nil:
// Default()), counting under key.
func NewSum(log *slog.Logger, level slog.Level, msg, key string, opts SumOptions) *Sum {
	s := &Sum{log: Or(log), level: level, msg: msg, key: key, window: opts.Window, clock: opts.Clock}
	if s.window <= 0 {
		s.window = DefaultWindow
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	return s
}

// Add counts n more of the Sum's kind. attrs describe the first of them;
// they are kept only when this Add opens a window. The record written for
// the window carries ctx's values when this Add opens it (not its
// cancellation).
func (s *Sum) Add(ctx context.Context, n int, attrs ...slog.Attr) {
	if !s.log.Enabled(ctx, s.level) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open {
		s.count += int64(n)
		s.records++
		return
	}
	s.open, s.gen = true, s.gen+1
	s.ctx, s.first = context.WithoutCancel(ctx), s.clock.Now()
	s.attrs = append(s.attrs[:0], attrs...)
	s.count, s.records = int64(n), 1
	gen := s.gen
	s.stop = s.clock.AfterFunc(s.window, func() { s.flush(gen) })
}

// Flush writes what the open window has added up, if anything, at once,
// and stops its timer.
func (s *Sum) Flush() { s.flush(0) }

// flush writes the open window's record when gen is its number, or 0.
func (s *Sum) flush(gen uint64) {
	s.mu.Lock()
	if !s.open || (gen != 0 && gen != s.gen) {
		s.mu.Unlock()
		return
	}
	if gen == 0 {
		s.stop()
	}
	r := slog.NewRecord(s.first, s.level, s.msg, 0)
	r.AddAttrs(slog.Int64(s.key, s.count))
	r.AddAttrs(s.attrs...)
	if s.records > 1 {
		r.AddAttrs(slog.Duration("summed_over", s.window))
	}
	ctx := s.ctx
	s.open, s.ctx, s.stop = false, nil, nil
	s.mu.Unlock()
	_ = s.log.Handler().Handle(ctx, r)
}
