package logging_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox/internal/logging"
)

// capture is a slog.Handler that keeps every record it is given.
type capture struct {
	mu      sync.Mutex
	level   slog.Level
	records []slog.Record
	attrs   []slog.Attr // from WithAttrs
}

func (c *capture) Enabled(_ context.Context, l slog.Level) bool { return l >= c.level }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.records = append(c.records, r.Clone())
	return nil
}
func (c *capture) WithAttrs(as []slog.Attr) slog.Handler {
	return &capture{level: c.level, attrs: append(slices.Clip(c.attrs), as...)}
}
func (c *capture) WithGroup(string) slog.Handler { return c }

func (c *capture) take() []slog.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.records
	c.records = nil
	return out
}

// attrs returns a record's attributes as key=value strings, in order.
func attrs(r slog.Record) []string {
	var out []string
	r.Attrs(func(a slog.Attr) bool {
		out = append(out, a.Key+"="+a.Value.String())
		return true
	})
	return out
}

func TestFromSlogKeepsMessageLevelAndFields(t *testing.T) {
	h := &capture{level: slog.LevelDebug}
	log := logging.FromSlog(h).With().Str("component", "outbox.dispatcher").Logger()
	log.Error().Str("event_id", "e-1").Int("attempts", 3).Int64("retry_in_ms", 1500).Bool("hot", true).
		Float64("ratio", 0.5).Err(errors.New("boom")).Msg("outbox event failed; marked DEAD")
	log.Warn().Msg("warned")
	log.Info().Msg("informed")
	log.Debug().Msg("debugged")
	log.Trace().Msg("traced")

	got := h.take()
	if len(got) != 5 {
		t.Fatalf("%d records, want 5", len(got))
	}
	r := got[0]
	if r.Message != "outbox event failed; marked DEAD" || r.Level != slog.LevelError {
		t.Fatalf("record %q at %v", r.Message, r.Level)
	}
	want := []string{"component=outbox.dispatcher", "event_id=e-1", "attempts=3", "retry_in_ms=1500", "hot=true", "ratio=0.5", "error=boom"}
	if a := attrs(r); !slices.Equal(a, want) {
		t.Fatalf("attributes %v, want %v", a, want)
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "retry_in_ms" && a.Value.Kind() != slog.KindInt64 {
			t.Errorf("retry_in_ms is a %v, want an int64", a.Value.Kind())
		}
		return true
	})
	levels := []slog.Level{slog.LevelWarn, slog.LevelInfo, slog.LevelDebug, slog.LevelDebug}
	for i, l := range levels {
		if got[i+1].Level != l {
			t.Errorf("record %q at %v, want %v", got[i+1].Message, got[i+1].Level, l)
		}
	}
}

func TestFromSlogDropsWhatTheHandlerDoesNotWant(t *testing.T) {
	h := &capture{level: slog.LevelWarn}
	log := logging.FromSlog(h)
	log.Info().Str("k", "v").Msg("dropped")
	log.Debug().Msg("dropped")
	log.Warn().Msg("kept")
	got := h.take()
	if len(got) != 1 || got[0].Message != "kept" {
		t.Fatalf("records %v, want only the warning", got)
	}
}

func TestHasWriter(t *testing.T) {
	var zero zerolog.Logger
	for _, tc := range []struct {
		name string
		l    zerolog.Logger
		want bool
	}{
		{"zero", zero, false},
		{"zero with context", zero.With().Str("k", "v").Logger(), false},
		{"New", zerolog.New(io.Discard), true},
		{"Nop", zerolog.Nop(), true},
		{"disabled level", zerolog.New(io.Discard).Level(zerolog.Disabled), true},
	} {
		if got := logging.HasWriter(tc.l); got != tc.want {
			t.Errorf("%s: HasWriter = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// withDefault makes h slog's default logger until the test ends. Tests that
// call it do not run in parallel.
func withDefault(t *testing.T, h slog.Handler) {
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
}

// TestResolve: Slog first, then a zerolog Logger with a writer, then the
// default, which passes warnings and errors to slog.Default() and nothing
// below; zerolog.Nop() and a discarding slog.Logger silence it.
func TestResolve(t *testing.T) {
	def := &capture{level: slog.LevelDebug}
	withDefault(t, def)
	var zero zerolog.Logger

	byDefault := logging.Resolve(zero, nil)
	byDefault.Error().Str("event_id", "e-1").Msg("dead")
	byDefault.Warn().Msg("overflow")
	byDefault.Info().Msg("not by default")
	withContext := logging.Resolve(zero.With().Str("component", "x").Logger(), nil)
	withContext.Warn().Msg("with context")
	got := def.take()
	var msgs []string
	for _, r := range got {
		msgs = append(msgs, r.Message)
	}
	if want := []string{"dead", "overflow", "with context"}; !slices.Equal(msgs, want) {
		t.Fatalf("default logger got %v, want %v", msgs, want)
	}

	own := &capture{level: slog.LevelDebug}
	toSlog := logging.Resolve(zerolog.Nop(), slog.New(own))
	toSlog.Info().Msg("to slog")
	if got := own.take(); len(got) != 1 {
		t.Fatalf("Slog got %d records, want 1", len(got))
	}
	nop := logging.Resolve(zerolog.Nop(), nil)
	nop.Error().Msg("silenced")
	discard := logging.Resolve(zero, slog.New(slog.DiscardHandler))
	discard.Error().Msg("silenced")
	if got := def.take(); len(got) != 0 {
		t.Fatalf("silenced loggers reached the default: %v", got)
	}
	if !logging.Set(zerolog.Nop(), nil) || !logging.Set(zero, slog.Default()) || logging.Set(zero, nil) {
		t.Fatal("Set")
	}
}

// TestDefaultFollowsSetDefault: the default logger looks slog.Default() up
// at each entry.
func TestDefaultFollowsSetDefault(t *testing.T) {
	log := logging.Default()
	first := &capture{level: slog.LevelDebug}
	withDefault(t, first)
	log.Warn().Msg("one")
	second := &capture{level: slog.LevelError}
	slog.SetDefault(slog.New(second))
	log.Warn().Msg("below the new default's level")
	log.Error().Msg("two")
	if len(first.take()) != 1 {
		t.Fatal("first default did not get its record")
	}
	if got := second.take(); len(got) != 1 || got[0].Message != "two" {
		t.Fatalf("second default got %v", got)
	}
}
