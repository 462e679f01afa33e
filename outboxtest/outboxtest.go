// Package outboxtest helps the tests of code that writes outbox events and of
// the listeners that handle them.
//
// New gives a test a Harness: a real SQLite outbox (a file in the test's
// temporary directory, removed with it), a Writer on it, a transaction
// manager, and a Registry for the listeners under test. The code under test
// writes through Harness.Writer in a transaction begun by Harness.Do (or
// Harness.Tx); the test then asks what was written, and delivers it:
//
//	func TestPlaceOrder(t *testing.T) {
//		h := outboxtest.New(t, outboxtest.Config{})
//		svc := shop.NewService(h.DB, h.Writer)
//		if err := h.Do(ctx, func(ctx context.Context) error { return svc.PlaceOrder(ctx, "o-1") }); err != nil {
//			t.Fatal(err)
//		}
//		h.AssertWritten(t, shop.OrderPlaced)
//
//		_ = h.Registry.Register(shop.Order, shop.OrderPlaced, mailer)
//		delivered, failed, err := h.DeliverAll(ctx) // runs mailer here, now
//	}
//
// Written reads the table, so it shows what was committed: the events of a
// rolled-back transaction are not there. DeliverAll claims the due events
// and runs their listeners one by one in the calling goroutine, recording
// each outcome as the dispatcher does (DONE; RETRY with the retry policy's
// delay, or a core.RetryAfter delay; DEAD for core.Permanent errors, the
// MaxAttempts-th failure, panics that exhaust the attempts, and events no
// listener is registered for). Nothing runs in the background, so there is
// nothing to wait for, and a listener may call t.Fatal. Retries fall due on
// the Harness's clock: Advance moves it forward.
//
// Unlike the dispatcher, DeliverAll runs no interceptors and reports no
// metrics; test those with a dispatch.Dispatcher.
package outboxtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/delivery"
	"github.com/outboxkit/outbox/store/sqlite"
	"github.com/outboxkit/outbox/txctx"
)

// T is the part of *testing.T (and *testing.B, *testing.F) a Harness uses.
type T interface {
	Helper()
	Cleanup(func())
	TempDir() string
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Config configures a Harness. The zero value is valid.
type Config struct {
	// Registry holds the listeners DeliverAll runs. Default: a new, empty
	// registry (Harness.Registry).
	Registry *core.Registry
	// Table is the outbox table name. Default "outbox_event".
	Table string
	// MaxAttempts is the number of failed deliveries after which an event
	// goes DEAD. Default dispatch.DefaultMaxAttempts (10).
	MaxAttempts int
	// Retry computes the delay before the next attempt after a failure.
	// Default &core.ExponentialBackoff{} (200ms base, 60s max, jittered).
	Retry core.RetryPolicy
}

// Owner is the lease owner token DeliverAll claims with.
const Owner = "outboxtest"

// maxRounds bounds the claims of one DeliverAll: listeners that keep
// writing events, or RetryAfter(err, 0) loops, end rather than spin.
const maxRounds = 1000

// claimBatch is the number of events one claim takes.
const claimBatch = 100

// Harness is a SQLite outbox for one test. Its fields are ready to hand to
// the code under test. Its methods report database failures with t.Fatalf
// (t being the T given to New), so call them from the test's goroutine.
type Harness struct {
	// DB is the SQLite pool (one connection; see sqlite.Open). Create the
	// tables of the code under test on it.
	DB *sql.DB
	// Store is the outbox store on DB.
	Store *sqlite.Store
	// Writer writes events in the transaction carried by its context (Do,
	// Tx) or passed to WriteTx. It has no hook: events wait in the table
	// until DeliverAll.
	Writer *core.Writer
	// Tx begins transactions on DB; Do is Tx.Do.
	Tx *txctx.Manager
	// Registry holds the listeners DeliverAll runs.
	Registry *core.Registry

	t           T
	maxAttempts int
	retry       core.RetryPolicy

	mu     sync.Mutex
	offset time.Duration // added to the wall clock by Now
}

// New returns a Harness on a new SQLite database in t.TempDir(), closed when
// the test ends. A bad Config fails the test.
func New(t T, cfg Config) *Harness {
	t.Helper()
	if cfg.MaxAttempts < 0 {
		t.Fatalf("outboxtest: MaxAttempts is negative")
	}
	h := &Harness{t: t, Registry: cfg.Registry, maxAttempts: cfg.MaxAttempts, retry: cfg.Retry}
	if h.Registry == nil {
		h.Registry = core.NewRegistry()
	}
	if h.maxAttempts == 0 {
		h.maxAttempts = dispatch.DefaultMaxAttempts
	}
	if h.retry == nil {
		h.retry = &core.ExponentialBackoff{}
	}
	var err error
	if h.Store, err = sqlite.New(sqlite.Config{Table: cfg.Table}); err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	if h.DB, err = sqlite.Open(filepath.Join(t.TempDir(), "outbox.db")); err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	t.Cleanup(func() { _ = h.DB.Close() })
	if err := h.Store.CreateSchema(context.Background(), h.DB); err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	if h.Writer, err = core.NewWriter(core.WriterConfig{Store: h.Store}); err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	if h.Tx, err = txctx.New(h.DB, txctx.Config{}); err != nil {
		t.Fatalf("outboxtest: %v", err)
	}
	return h
}

// Do runs fn in a transaction on DB carried by fn's context, committing when
// fn returns nil (see txctx.Manager.Do). It returns fn's error.
func (h *Harness) Do(ctx context.Context, fn func(ctx context.Context) error) error {
	return h.Tx.Do(ctx, fn)
}

// Now returns the Harness's clock: the wall clock plus every Advance so far.
func (h *Harness) Now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Now().Add(h.offset)
}

// Advance moves the Harness's clock forward by d, so that retries scheduled
// within d fall due for the next DeliverAll. A negative d fails the test.
func (h *Harness) Advance(d time.Duration) {
	h.t.Helper()
	if d < 0 {
		h.t.Fatalf("outboxtest: Advance(%s): the clock only moves forward", d)
	}
	h.mu.Lock()
	h.offset += d
	h.mu.Unlock()
}

// Written returns every event in the outbox table, whatever its status, in
// delivery order (creation time, then event id).
func (h *Harness) Written() []core.Event {
	h.t.Helper()
	ctx := context.Background()
	rows, err := h.DB.QueryContext(ctx, `SELECT event_id FROM "`+h.Store.Table()+`" ORDER BY created_at, event_id`)
	if err != nil {
		h.t.Fatalf("outboxtest: list events: %v", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			h.t.Fatalf("outboxtest: list events: %v", err)
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		h.t.Fatalf("outboxtest: list events: %v", err)
	}
	events := make([]core.Event, 0, len(ids))
	for _, id := range ids {
		events = append(events, h.Event(id))
	}
	return events
}

// Event returns the stored event id. A missing id fails the test.
func (h *Harness) Event(id string) core.Event {
	h.t.Helper()
	ev, err := h.Store.Get(context.Background(), h.DB, id)
	if err != nil {
		h.t.Fatalf("outboxtest: %v", err)
	}
	return ev
}

// AssertWritten reports an error on t unless the event types of Written, in
// order, are exactly types, and returns whether they were.
func (h *Harness) AssertWritten(t T, types ...core.EventType) bool {
	t.Helper()
	want := make([]string, len(types))
	for i, typ := range types {
		want[i] = typ.Name()
	}
	var got []string
	for _, ev := range h.Written() {
		got = append(got, ev.Type())
	}
	if slices.Equal(got, want) {
		return true
	}
	t.Errorf("outboxtest: events written: [%s], want [%s]", strings.Join(got, " "), strings.Join(want, " "))
	return false
}

// Clear deletes every event from the outbox table, so that the next
// assertions see only what is written after it.
func (h *Harness) Clear() {
	h.t.Helper()
	if _, err := h.DB.ExecContext(context.Background(), `DELETE FROM "`+h.Store.Table()+`"`); err != nil {
		h.t.Fatalf("outboxtest: clear: %v", err)
	}
}

// DeliverAll delivers every event that is due on the Harness's clock, in
// delivery order, running each listener in the calling goroutine and
// recording the outcome as the dispatcher does. Events written while it
// runs (by listeners, say) are delivered too; failed events come back only
// once Advance makes their retry due. It returns how many deliveries
// succeeded (DONE) and how many failed (RETRY or DEAD). The error reports a
// database failure, or a run that did not settle within 1000 claims; a
// failing listener is not an error.
func (h *Harness) DeliverAll(ctx context.Context) (delivered, failed int, err error) {
	for range maxRounds {
		now := h.Now()
		events, bad, err := h.Store.Claim(ctx, h.DB, core.ClaimParams{
			Owner: Owner, Now: now, LeaseTimeout: time.Hour, Limit: claimBatch,
		})
		if err != nil {
			return delivered, failed, fmt.Errorf("outboxtest: %w", err)
		}
		if len(events)+len(bad) == 0 {
			return delivered, failed, nil
		}
		for _, b := range bad {
			failed++
			if _, err := h.Store.MarkDead(ctx, h.DB, Owner, b.ID, now, b.Error()); err != nil {
				return delivered, failed, fmt.Errorf("outboxtest: %w", err)
			}
		}
		for _, ev := range events {
			ok, err := h.deliver(ctx, ev)
			if ok {
				delivered++
			} else {
				failed++
			}
			if err != nil {
				return delivered, failed, err
			}
		}
	}
	return delivered, failed, fmt.Errorf("outboxtest: events still due after %d claims of %d: "+
		"do listeners keep writing events, or retry with no delay?", maxRounds, claimBatch)
}

// deliver runs ev's listener and records the outcome; ok reports DONE.
func (h *Harness) deliver(ctx context.Context, ev core.Event) (ok bool, err error) {
	now := h.Now()
	id := ev.ID()
	l, found := h.Registry.Lookup(ev.AggregateType(), ev.Type())
	if !found {
		msg := fmt.Sprintf("%v: aggregate type %q, event type %q", core.ErrUnroutable, ev.AggregateType(), ev.Type())
		_, err = h.Store.MarkDead(ctx, h.DB, Owner, id, now, msg)
		return false, wrap(err)
	}
	lerr := call(ctx, l, ev)
	if lerr == nil {
		_, err = h.Store.MarkDone(ctx, h.DB, Owner, id, now)
		return true, wrap(err)
	}
	if dead, delay := delivery.AfterFailure(lerr, ev.Attempts+1, h.maxAttempts, h.retry); dead {
		_, err = h.Store.MarkDead(ctx, h.DB, Owner, id, now, core.TruncateError(lerr.Error()))
	} else {
		_, err = h.Store.MarkRetry(ctx, h.DB, Owner, id, now.Add(delay), core.TruncateError(lerr.Error()))
	}
	return false, wrap(err)
}

func wrap(err error) error {
	if err != nil {
		return fmt.Errorf("outboxtest: record outcome: %w", err)
	}
	return nil
}

// call runs the listener; a panic becomes its error, as in the dispatcher.
func call(ctx context.Context, l core.Listener, ev core.Event) (err error) {
	defer delivery.Recover(&err)
	return l.Handle(ctx, ev)
}
