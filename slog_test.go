package outbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/sqlite"
)

// records is a slog.Handler that keeps every record it is given.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, rec.Clone())
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.list {
		out = append(out, rec.Level.String()+" "+rec.Message)
	}
	return out
}

// attr returns the value of the first record's attribute key whose message
// is msg.
func (r *records) attr(msg, key string) (slog.Value, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.list {
		if rec.Message != msg {
			continue
		}
		var v slog.Value
		found := false
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v, found = a.Value, true
				return false
			}
			return true
		})
		return v, found
	}
	return slog.Value{}, false
}

const deadMsg = "outbox event failed; marked DEAD"

// runDead runs an outbox configured by cfg (DB, Store and Registry filled
// in) on SQLite until one event has been marked DEAD, and returns its id.
func runDead(t *testing.T, configure func(*outbox.Config)) string {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "app.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	store, err := sqlite.New(sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateSchema(ctx, db); err != nil {
		t.Fatal(err)
	}
	reg := core.NewRegistry()
	if err := reg.RegisterFunc(core.AggregateName("Order"), core.EventName("Failed"),
		func(context.Context, core.Event) error { return core.Permanent(errors.New("declined")) }); err != nil {
		t.Fatal(err)
	}
	cfg := outbox.Config{DB: db, Store: store, Registry: reg}
	configure(&cfg)
	ob, err := outbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Start(ctx); err != nil {
		t.Fatal(err)
	}
	env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("Failed"), AggregateType: core.AggregateName("Order"), JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Do(ctx, func(ctx context.Context) error { _, err := ob.Writer().Write(ctx, env); return err }); err != nil {
		t.Fatal(err)
	}
	// The hot path has the event; Close drains its delivery and the record.
	if err := ob.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ev, err := store.Get(ctx, db, env.ID())
	if err != nil || ev.Status != core.StatusDead {
		t.Fatalf("event after Close: %v, %v; want DEAD", ev.Status, err)
	}
	return env.ID()
}

// withDefault makes h slog's default logger until the test ends; tests
// that call it do not run in parallel.
func withDefault(t *testing.T, h slog.Handler) {
	old := slog.Default()
	slog.SetDefault(slog.New(h))
	t.Cleanup(func() { slog.SetDefault(old) })
}

// TestDefaultLoggerReportsDead: with no logger configured, a DEAD event is
// an error record on slog.Default(), and nothing below warning level is.
func TestDefaultLoggerReportsDead(t *testing.T) {
	def := &records{}
	withDefault(t, def)
	id := runDead(t, func(*outbox.Config) {})
	v, ok := def.attr(deadMsg, "event_id")
	if !ok || v.String() != id {
		t.Fatalf("default logger got %v; want %q with event_id=%s", def.messages(), deadMsg, id)
	}
	for _, m := range def.messages() {
		if level, _, _ := strings.Cut(m, " "); !slices.Contains([]string{"WARN", "ERROR"}, level) {
			t.Errorf("below warning level by default: %s", m)
		}
	}
}

// TestSilencedLoggers: a discarding slog.Logger, or a zerolog.Nop() through
// zerolog's slog bridge, keep the default logger quiet.
func TestSilencedLoggers(t *testing.T) {
	def := &records{}
	withDefault(t, def)
	runDead(t, func(c *outbox.Config) { c.Logger = slog.New(slog.DiscardHandler) })
	runDead(t, func(c *outbox.Config) { c.Logger = slog.New(zerolog.NewSlogHandler(zerolog.Nop())) })
	if m := def.messages(); len(m) != 0 {
		t.Fatalf("silenced outboxes logged to the default: %v", m)
	}
}

// TestLoggerPerComponent: Config.Logger reaches every component; a
// component's own Logger wins over it.
func TestLoggerPerComponent(t *testing.T) {
	t.Parallel()
	all, dispatcher := &records{}, &records{}
	runDead(t, func(c *outbox.Config) {
		c.Logger = slog.New(all)
		c.Dispatch.Logger = slog.New(dispatcher)
	})
	if _, ok := dispatcher.attr(deadMsg, "event_id"); !ok {
		t.Fatalf("dispatcher's own logger got %v", dispatcher.messages())
	}
	if _, ok := all.attr(deadMsg, "event_id"); ok {
		t.Fatal("the DEAD record went to the outbox's logger, not the dispatcher's")
	}
	shared := &records{}
	runDead(t, func(c *outbox.Config) { c.Logger = slog.New(shared) })
	if v, ok := shared.attr(deadMsg, "attempts"); !ok || v.Kind() != slog.KindInt64 || v.Int64() != 1 {
		t.Fatalf("outbox logger got %v; attempts=%v", shared.messages(), v)
	}
}

// TestZerologBridge: a zerolog.Logger wired in with zerolog's slog bridge
// gets the DEAD line as one zerolog JSON entry, fields and all.
func TestZerologBridge(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	id := runDead(t, func(c *outbox.Config) {
		c.Logger = slog.New(zerolog.NewSlogHandler(zerolog.New(&buf).Level(zerolog.WarnLevel)))
	})
	var line map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
		if strings.Contains(l, deadMsg) {
			if err := json.Unmarshal([]byte(l), &line); err != nil {
				t.Fatalf("zerolog line %q: %v", l, err)
			}
		}
	}
	if line["level"] != "error" || line["message"] != deadMsg || line["event_id"] != id ||
		line["component"] != "outbox.dispatcher" || line["attempts"] != float64(1) {
		t.Fatalf("zerolog got %q; want the DEAD line of %s with its fields", buf.String(), id)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestSlogPageShowsTheExample: docs/integrations/slog.md shows
// example_slog_test.go as it is, so the page's example is one that runs.
func TestSlogPageShowsTheExample(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("docs/integrations/slog.md")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile("example_slog_test.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "```go\n"+string(example)+"```\n") {
		t.Fatal("docs/integrations/slog.md does not show example_slog_test.go as it is; copy the file into the page")
	}
}
