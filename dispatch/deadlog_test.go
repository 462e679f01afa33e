package dispatch_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
)

// syncBuffer is a log sink safe for the dispatcher's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDeadOrderedLogLine: the ERROR line of an ordered event marked DEAD
// says what happens to its key: blocked (DeadBlocks), with the commands
// that unblock it, or moved on (DeadContinues); an unordered event's line
// says nothing of a key.
func TestDeadOrderedLogLine(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	tg.Store = tg.Ordered
	reg := core.NewRegistry()
	fail := core.ListenerFunc(func(context.Context, core.Event) error { return core.Permanent(errors.New("declined")) })
	for _, agg := range []string{"Order", "Ledger", "Plain"} {
		if err := reg.Register(core.AggregateName(agg), core.EventName("Failed"), fail); err != nil {
			t.Fatal(err)
		}
	}
	var logs syncBuffer
	node := testnode.Start(t, tg.Store, tg.DB, reg, testnode.Defaults{
		Retry: &core.ExponentialBackoff{Base: time.Millisecond, Max: 5 * time.Millisecond}, Interval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError})),
	}, testnode.Options{Dispatch: func(c *dispatch.Config) { c.MaxAttempts = 1 }})
	var ids []string
	for _, agg := range []string{"Order", "Ledger", "Plain"} {
		e, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("Failed"), AggregateType: core.AggregateName(agg),
			AggregateID: "k1", JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		write(t, node, e)
		ids = append(ids, e.ID())
	}
	end := time.Now().Add(e2eDeadline)
	for strings.Count(logs.String(), "marked DEAD") < 3 {
		if time.Now().After(end) {
			t.Fatalf("3 DEAD lines expected before the deadline; logs:\n%s", logs.String())
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
	lines := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		for _, id := range ids {
			if strings.Contains(line, id) {
				lines[id] = line
			}
		}
	}
	for i, want := range []struct{ has, hasNot string }{
		{`its key Order/k1 is now blocked: the key's later events wait until this one is replayed or skipped (outboxctl dead blocked, dead replay ID, dead skip ID)"`, "moves on"},
		{`its key Ledger/k1 moves on to its next event (DeadContinues)"`, "blocked"},
		{`"msg":"outbox event failed; marked DEAD"`, "key"},
	} {
		line := lines[ids[i]]
		if !strings.Contains(line, want.has) || strings.Contains(line, want.hasNot) {
			t.Errorf("DEAD line of %s: %s\nwant it to contain %q and not %q", ids[i], line, want.has, want.hasNot)
		}
	}
	if !strings.Contains(lines[ids[0]], `"aggregate_id":"k1"`) || !strings.Contains(lines[ids[0]], `"seq":1`) {
		t.Errorf("ordered DEAD line without the key's id and seq: %s", lines[ids[0]])
	}
}
