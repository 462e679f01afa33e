package watch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/outboxkit/outbox/core"
)

// source fails each Watch with the next of errs and cancels the run's
// context after the last.
type source struct {
	errs   []error
	cancel context.CancelFunc
	calls  int
}

func (s *source) Watch(ctx context.Context, _ core.DBTX, _ func()) error {
	err := s.errs[s.calls]
	s.calls++
	if s.calls == len(s.errs) {
		s.cancel()
	}
	return err
}

type records struct {
	mu    sync.Mutex
	lines []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	line := rec.Level.String() + " " + rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "consecutive_failures" {
			line += fmt.Sprintf(" failures=%v", a.Value)
		}
		return true
	})
	r.lines = append(r.lines, line)
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

var logs = Logs{Unable: "cannot watch", Lost: "lost"}

func TestRunReconnectsUntilDone(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &source{errs: []error{errors.New("reset"), errors.New("reset"), errors.New("reset")}, cancel: cancel}
	rec := &records{}
	Run(ctx, src, nil, func() {}, slog.New(rec), logs)
	if src.calls != 3 {
		t.Errorf("Watch called %d times, want 3", src.calls)
	}
	// The third failure ends with the context: not logged as lost.
	if got, want := strings.Join(rec.lines, "; "), "WARN lost failures=1; WARN lost failures=2"; got != want {
		t.Errorf("logged %q, want %q", got, want)
	}
}

func TestRunStopsWhenTheSourceCannotWatch(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := &source{errs: []error{fmt.Errorf("no dedicated connection: %w", core.ErrInvalid), nil}, cancel: func() {}}
	rec := &records{}
	Run(ctx, src, nil, func() {}, slog.New(rec), logs)
	if src.calls != 1 {
		t.Errorf("Watch called %d times, want 1", src.calls)
	}
	if got, want := strings.Join(rec.lines, "; "), "ERROR cannot watch"; got != want {
		t.Errorf("logged %q, want %q", got, want)
	}
}
