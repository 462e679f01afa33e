package core_test

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/txctx"
)

// recorder is a WriterHook that records its calls.
type recorder struct {
	mu     sync.Mutex
	calls  []string
	before func([]core.Envelope) ([]core.Envelope, error)
	owner  string
}

func (r *recorder) log(stage string, envs []core.Envelope) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, len(envs))
	for i, e := range envs {
		ids[i] = e.ID()
	}
	r.calls = append(r.calls, stage+":"+strings.Join(ids, ","))
}

func (r *recorder) BeforeWrite(_ context.Context, envs []core.Envelope) ([]core.Envelope, error) {
	r.log("before", envs)
	if r.before != nil {
		return r.before(envs)
	}
	return envs, nil
}
func (r *recorder) AfterWrite(_ context.Context, envs []core.Envelope) error {
	r.log("write", envs)
	return errors.New("after-write failure is only logged")
}
func (r *recorder) AfterCommit(_ context.Context, envs []core.Envelope) error {
	r.log("commit", envs)
	panic("after-commit panic is only logged")
}
func (r *recorder) AfterRollback(_ context.Context, envs []core.Envelope) error {
	r.log("rollback", envs)
	return nil
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

type leasing struct{ *recorder }

func (l leasing) LeaseOwner() string { return l.owner }

func mustEnv(t *testing.T, id string) core.Envelope {
	t.Helper()
	e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: orderPlaced, JSON: []byte(`{"id":"` + id + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func rowCount(t *testing.T, tg testdb.Target) int {
	t.Helper()
	var n int
	if err := tg.DB.QueryRow("SELECT COUNT(*) FROM " + tg.Table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func setup(t *testing.T, hook core.WriterHook) (testdb.Target, *core.Writer, *txctx.Manager) {
	t.Helper()
	tg := testdb.SQLite(t)
	var buf strings.Builder
	w, err := core.NewWriter(core.WriterConfig{Store: tg.Store, Hook: hook, Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	m, err := txctx.New(tg.DB, txctx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return tg, w, m
}

func TestWriterLifecycleOnCommit(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	tg, w, m := setup(t, rec)
	err := m.Do(context.Background(), func(ctx context.Context) error {
		ids, err := w.WriteAll(ctx, []core.Envelope{mustEnv(t, "a"), mustEnv(t, "b")})
		if err != nil || !slices.Equal(ids, []string{"a", "b"}) {
			t.Errorf("WriteAll = %v, %v", ids, err)
		}
		id, err := w.Write(ctx, mustEnv(t, "c"))
		if err != nil || id != "c" {
			t.Errorf("Write = %q, %v", id, err)
		}
		if got := rec.got(); slices.Contains(got, "commit:a,b") {
			t.Errorf("AfterCommit ran before commit: %v", got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v (hook errors and panics must not propagate)", err)
	}
	want := []string{"before:a,b", "write:a,b", "before:c", "write:c", "commit:a,b", "commit:c"}
	if got := rec.got(); !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	if n := rowCount(t, tg); n != 3 {
		t.Fatalf("rows = %d, want 3", n)
	}
}

// Guarantee 1: a rolled-back business transaction leaves no outbox row and
// runs no after-commit hook (so no listener).
func TestWriterRollbackLeavesNothing(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	tg, w, m := setup(t, rec)
	boom := errors.New("business failure")
	err := m.Do(context.Background(), func(ctx context.Context) error {
		if _, err := w.Write(ctx, mustEnv(t, "r")); err != nil {
			t.Fatal(err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v", err)
	}
	if got := rec.got(); !slices.Equal(got, []string{"before:r", "write:r", "rollback:r"}) {
		t.Fatalf("calls = %v", got)
	}
	if n := rowCount(t, tg); n != 0 {
		t.Fatalf("rows after rollback = %d", n)
	}
}

func TestWriterBeforeWriteTransformsAndSuppresses(t *testing.T) {
	t.Parallel()
	rec := &recorder{before: func(envs []core.Envelope) ([]core.Envelope, error) {
		var kept []core.Envelope
		for _, e := range envs {
			if e.ID() != "drop" {
				kept = append(kept, e)
			}
		}
		return kept, nil
	}}
	tg, w, m := setup(t, rec)
	err := m.Do(context.Background(), func(ctx context.Context) error {
		ids, err := w.WriteAll(ctx, []core.Envelope{mustEnv(t, "keep"), mustEnv(t, "drop")})
		if err != nil || !slices.Equal(ids, []string{"keep"}) {
			t.Errorf("transformed: %v %v", ids, err)
		}
		id, err := w.Write(ctx, mustEnv(t, "drop"))
		if err != nil || id != "" {
			t.Errorf("suppressed: %q %v", id, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.got(); slices.Contains(got, "write:") || slices.Contains(got, "commit:") {
		t.Errorf("suppressed write ran hooks: %v", got)
	}
	if n := rowCount(t, tg); n != 1 {
		t.Fatalf("rows = %d, want 1", n)
	}
}

func TestWriterBeforeWriteErrorAndPanicAbort(t *testing.T) {
	t.Parallel()
	for name, before := range map[string]func([]core.Envelope) ([]core.Envelope, error){
		"error": func([]core.Envelope) ([]core.Envelope, error) { return nil, errors.New("rejected") },
		"panic": func([]core.Envelope) ([]core.Envelope, error) { panic("hook bug") },
	} {
		t.Run(name, func(t *testing.T) {
			tg, w, m := setup(t, &recorder{before: before})
			err := m.Do(context.Background(), func(ctx context.Context) error {
				_, err := w.Write(ctx, mustEnv(t, "x"))
				if err == nil || !strings.Contains(err.Error(), "BeforeWrite") {
					t.Errorf("Write err = %v", err)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if n := rowCount(t, tg); n != 0 {
				t.Fatalf("rows = %d", n)
			}
		})
	}
}

// Guarantee 9: bad input gets a clear error and changes nothing.
func TestWriterRejectsBadInput(t *testing.T) {
	t.Parallel()
	tg, w, m := setup(t, nil)
	ctx := context.Background()
	// Each error without a transaction matches ErrNoTransaction and says
	// what went wrong and the ways out.
	var nilTx *sql.Tx
	for _, tc := range []struct {
		name  string
		write func() (string, error)
		want  []string
	}{
		{"outside a transaction", func() (string, error) { return w.Write(ctx, mustEnv(t, "no-tx")) },
			[]string{"no transaction in ctx", "ob.Do", "txctx.Manager.Do", "WriteTx"}},
		{"pool as transaction", func() (string, error) { return w.WriteTx(ctx, tg.DB, mustEnv(t, "pool")) },
			[]string{"WriteTx got a connection pool or connection (*sql.DB)", "BeginTx", "ob.Do"}},
		{"nil transaction", func() (string, error) { return w.WriteTx(ctx, nil, mustEnv(t, "nil")) },
			[]string{"WriteTx got a nil transaction", "*sql.Tx", "ob.Do", "txctx.Manager.Do"}},
		{"nil *sql.Tx", func() (string, error) { return w.WriteTx(ctx, nilTx, mustEnv(t, "nil-sql-tx")) },
			[]string{"WriteTx got a nil transaction (*sql.Tx)", "ob.Do"}},
	} {
		_, err := tc.write()
		if !errors.Is(err, core.ErrNoTransaction) {
			t.Errorf("%s: %v, want ErrNoTransaction", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", tc.name, err, w)
			}
		}
	}
	if _, err := w.WriteTx(ctx, nil, mustEnv(t, "nil")); err != nil && strings.Contains(err.Error(), "in ctx") {
		t.Errorf("nil transaction has Write's message: %v", err)
	}
	err := m.Do(ctx, func(ctx context.Context) error {
		if _, err := w.WriteAll(ctx, []core.Envelope{mustEnv(t, "ok"), {}}); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("zero envelope: %v", err)
		}
		if _, err := w.WriteAll(ctx, []core.Envelope{mustEnv(t, "d"), mustEnv(t, "d")}); !errors.Is(err, core.ErrDuplicateEvent) {
			t.Errorf("duplicate in batch: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := rowCount(t, tg); n != 0 {
		t.Fatalf("rows = %d after rejected writes", n)
	}
	if _, err := core.NewWriter(core.WriterConfig{}); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("writer without store: %v", err)
	}
}

func TestWriteTxExplicitTransaction(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	tg, w, _ := setup(t, leasing{rec})
	rec.owner = "me"
	tx, err := tg.DB.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteTx(context.Background(), tx, mustEnv(t, "plain")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// A plain *sql.Tx has no after-commit callbacks, so the event is not
	// leased for a hot path that will never see it: the poller delivers it.
	var lockedBy sql.NullString
	if err := tg.DB.QueryRow("SELECT locked_by FROM " + tg.Table + " WHERE event_id = 'plain'").Scan(&lockedBy); err != nil {
		t.Fatal(err)
	}
	if lockedBy.Valid {
		t.Fatalf("plain-tx event leased by %q", lockedBy.String)
	}
	if got := rec.got(); !slices.Equal(got, []string{"before:plain", "write:plain"}) {
		t.Fatalf("calls = %v", got)
	}
}

func TestWriterLeasesHotPathEvents(t *testing.T) {
	t.Parallel()
	rec := &recorder{owner: "proc-1"}
	tg, w, m := setup(t, leasing{rec})
	err := m.Do(context.Background(), func(ctx context.Context) error {
		_, err := w.Write(ctx, mustEnv(t, "hot"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := tg.Store.Get(context.Background(), tg.DB, "hot")
	if err != nil {
		t.Fatal(err)
	}
	if ev.LockedBy != "proc-1" || ev.LockedAt.IsZero() {
		t.Fatalf("hot event lease = %q %v", ev.LockedBy, ev.LockedAt)
	}
}

type requestIDKey struct{}

// TestWriterContextHeaders: the headers ContextHeaders returns for the
// writing context are stored with every event, an event's own header of the
// same key wins, the caller's envelopes are not changed, and a header the
// table cannot hold fails the write with nothing written.
func TestWriterContextHeaders(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	w, err := core.NewWriter(core.WriterConfig{Store: tg.Store, ContextHeaders: func(ctx context.Context) map[string]string {
		id, _ := ctx.Value(requestIDKey{}).(string)
		return map[string]string{"request-id": id, "source": "ctx"}
	}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := txctx.New(tg.DB, txctx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	own, err := core.NewEnvelope(core.EnvelopeSpec{ID: "own", Type: orderPlaced, JSON: []byte(`{}`),
		Headers: map[string]string{"source": "event"}})
	if err != nil {
		t.Fatal(err)
	}
	plain := mustEnv(t, "plain")
	ctx := context.WithValue(context.Background(), requestIDKey{}, "req-7")
	if err := m.Do(ctx, func(ctx context.Context) error {
		_, err := w.WriteAll(ctx, []core.Envelope{own, plain})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]map[string]string{
		"own":   {"request-id": "req-7", "source": "event"},
		"plain": {"request-id": "req-7", "source": "ctx"},
	} {
		ev, err := tg.Store.Get(context.Background(), tg.DB, id)
		if err != nil {
			t.Fatal(err)
		}
		if got := ev.Headers(); !maps.Equal(got, want) {
			t.Errorf("%s: headers %v, want %v", id, got, want)
		}
	}
	if h := plain.Headers(); h != nil {
		t.Errorf("the caller's envelope changed: headers %v", h)
	}

	bad, err := core.NewWriter(core.WriterConfig{Store: tg.Store, ContextHeaders: func(context.Context) map[string]string {
		return map[string]string{"": "empty key"}
	}})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Do(ctx, func(ctx context.Context) error {
		_, err := bad.Write(ctx, mustEnv(t, "bad-header"))
		return err
	})
	if !errors.Is(err, core.ErrInvalid) {
		t.Errorf("empty header key from ContextHeaders: %v, want ErrInvalid", err)
	}
	if _, err := tg.Store.Get(context.Background(), tg.DB, "bad-header"); !errors.Is(err, core.ErrNotFound) {
		t.Errorf("bad-header was written: %v", err)
	}
}

// seqRecorder is a leasing hook that records the ids and seqs of the events
// AfterCommit receives.
type seqRecorder struct {
	recorder
	mu   sync.Mutex
	seqs map[string]int64
}

func (s *seqRecorder) AfterCommit(_ context.Context, envs []core.Envelope) error {
	s.recorder.log("commit", envs)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range envs {
		s.seqs[e.ID()] = e.Seq()
	}
	return nil
}

func (s *seqRecorder) LeaseOwner() string { return s.owner }

// TestWriterKeepsWaitingEventsFromHook: on an ordered store, a hook that
// leases (the hot path) receives the events written as their key's head and
// the unordered ones, stamped with their seqs, and not those stored WAITING,
// which only their predecessor's promotion may deliver; a hook that leases
// nothing receives them all.
func TestWriterKeepsWaitingEventsFromHook(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	m, err := txctx.New(tg.DB, txctx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	keyed := func(id, aggID string) core.Envelope {
		e, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: orderPlaced, AggregateType: core.AggregateName("Order"),
			AggregateID: aggID, JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	write := func(hook core.WriterHook, envs ...core.Envelope) {
		t.Helper()
		w, err := core.NewWriter(core.WriterConfig{Store: tg.Ordered, Hook: hook, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Do(context.Background(), func(ctx context.Context) error {
			_, err := w.WriteAll(ctx, envs)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	hot := &seqRecorder{recorder: recorder{owner: "proc-1"}, seqs: map[string]int64{}}
	write(hot, keyed("a-1", "A"), keyed("a-2", "A"), mustEnv(t, "u-1"), keyed("b-1", "B"))
	if got, want := hot.got(), []string{"before:a-1,a-2,u-1,b-1", "write:a-1,u-1,b-1", "commit:a-1,u-1,b-1"}; !slices.Equal(got, want) {
		t.Fatalf("leasing hook calls %q, want %q", got, want)
	}
	if want := map[string]int64{"a-1": 1, "u-1": 0, "b-1": 1}; !maps.Equal(hot.seqs, want) {
		t.Fatalf("seqs seen by the hook %v, want %v", hot.seqs, want)
	}
	for id, want := range map[string]string{"a-1": "proc-1", "a-2": "", "b-1": "proc-1"} {
		ev, err := tg.Store.Get(context.Background(), tg.DB, id)
		if err != nil {
			t.Fatal(err)
		}
		if ev.LockedBy != want {
			t.Errorf("%s leased by %q, want %q", id, ev.LockedBy, want)
		}
	}
	plain := &recorder{}
	write(plain, keyed("a-3", "A"))
	if got, want := plain.got(), []string{"before:a-3", "write:a-3", "commit:a-3"}; !slices.Equal(got, want) {
		t.Fatalf("plain hook calls %q, want %q", got, want)
	}
}

// failingHook fails AfterWrite and panics in AfterCommit.
type failingHook struct{}

func (failingHook) BeforeWrite(_ context.Context, envs []core.Envelope) ([]core.Envelope, error) {
	return envs, nil
}
func (failingHook) AfterWrite(context.Context, []core.Envelope) error  { return errors.New("hook down") }
func (failingHook) AfterCommit(context.Context, []core.Envelope) error { panic("hook panicked") }
func (failingHook) AfterRollback(context.Context, []core.Envelope) error {
	return nil
}

type traceKey struct{}

// traceHandler keeps, for each record, its message and the trace value of
// the context it was handled with.
type traceHandler struct {
	mu   sync.Mutex
	seen []string
}

func (h *traceHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *traceHandler) Handle(ctx context.Context, r slog.Record) error {
	trace, _ := ctx.Value(traceKey{}).(string)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen = append(h.seen, r.Message+" trace="+trace)
	return nil
}
func (h *traceHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *traceHandler) WithGroup(string) slog.Handler      { return h }

// TestWriterLogsWithTheCallersContext: the records of a failing hook reach
// the handler with the context of the write, so a handler that reads trace
// ids from it finds them, after the commit too.
func TestWriterLogsWithTheCallersContext(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	h := &traceHandler{}
	w, err := core.NewWriter(core.WriterConfig{Store: tg.Store, Hook: failingHook{}, Logger: slog.New(h)})
	if err != nil {
		t.Fatal(err)
	}
	m, err := txctx.New(tg.DB, txctx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.WithValue(context.Background(), traceKey{}, "t-1")
	if err := m.Do(ctx, func(ctx context.Context) error {
		_, err := w.Write(ctx, mustEnv(t, "traced"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"outbox writer hook failed trace=t-1", "outbox writer hook panicked trace=t-1"}
	if !slices.Equal(h.seen, want) {
		t.Fatalf("records %q, want %q", h.seen, want)
	}
}
