// Package testnode runs outbox instances inside a test process, as a
// service's main wires them: a Dispatcher, a Poller, a Writer whose
// after-commit hook feeds the dispatcher, and a txctx Manager, on one store
// and pool. It also gives the tests that drive such nodes their instruments:
// Metrics counts what the components report, a DeliveryLog counts listener
// calls and lets a test wait for a condition on them, and StatusCounts reads
// the outbox table by status.
//
// The end-to-end tests of package dispatch and the reliability suite use it,
// each with its own Defaults.
package testnode

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/txctx"
)

// Defaults is what every node of a test suite starts from; Options then
// adjust one node.
type Defaults struct {
	// Retry is the dispatcher's retry policy. Default: the dispatcher's.
	Retry core.RetryPolicy
	// Interval is the poller's interval. Default: the poller's.
	Interval time.Duration
	// Logger is given to the dispatcher, the poller and the writer. With a
	// nil Logger their warnings and errors go to slog.Default() (stderr,
	// shown with a failing test's output).
	Logger *slog.Logger
	// PollerMetrics gives the node's Metrics to the poller too, which counts
	// there its store errors and the undecodable rows it marks DEAD.
	// Default: the poller reports nothing.
	PollerMetrics bool
}

// Options adjust one node; each field may be nil.
type Options struct {
	// Dispatch changes the dispatcher's config after Defaults are applied.
	Dispatch func(*dispatch.Config)
	// Poller changes the poller's config after Defaults are applied.
	Poller func(*poller.Config)
	// Hook wraps the dispatcher's writer hook before the writer gets it.
	Hook func(core.LeasingHook) core.LeasingHook
}

// Node is one running outbox instance.
type Node struct {
	Dispatcher *dispatch.Dispatcher
	Poller     *poller.Poller
	Writer     *core.Writer   // with the dispatcher's after-commit hook
	TxManager  *txctx.Manager // on the node's pool
	Metrics    *Metrics       // given to the dispatcher (and the poller under Defaults.PollerMetrics)
	closed     sync.Once
}

// Start wires a node on st and db that delivers to reg's listeners, starts
// its dispatcher and poller, and closes it when the test ends. It fails the
// test if a component refuses its config or does not start.
func Start(t testing.TB, st core.Store, db *sql.DB, reg *core.Registry, def Defaults, o Options) *Node {
	t.Helper()
	n := &Node{Metrics: &Metrics{}}
	dcfg := dispatch.Config{
		Store: st, DB: db, Registry: reg, Metrics: n.Metrics, Logger: def.Logger, Retry: def.Retry,
	}
	if o.Poller != nil {
		// One lease for the dispatcher and its poller: a lease set through
		// Options.Poller is the dispatcher's too (poller.New rejects a
		// poller lease that differs from its dispatcher's).
		var probe poller.Config
		o.Poller(&probe)
		dcfg.LeaseTimeout = probe.LeaseTimeout
	}
	if o.Dispatch != nil {
		o.Dispatch(&dcfg)
	}
	d, err := dispatch.New(dcfg)
	if err != nil {
		t.Fatal(err)
	}
	pcfg := poller.Config{Store: st, DB: db, Handler: d, Interval: def.Interval, Logger: def.Logger}
	if def.PollerMetrics {
		pcfg.Metrics = n.Metrics
	}
	if o.Poller != nil {
		o.Poller(&pcfg)
	}
	p, err := poller.New(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	if p.Owner() != d.Owner() {
		t.Fatalf("poller owner %q != dispatcher owner %q", p.Owner(), d.Owner())
	}
	hook := d.WriterHook()
	if o.Hook != nil {
		hook = o.Hook(hook)
	}
	w, err := core.NewWriter(core.WriterConfig{Store: st, Hook: hook, Logger: def.Logger})
	if err != nil {
		t.Fatal(err)
	}
	txm, err := txctx.New(db, txctx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	n.Dispatcher, n.Poller, n.Writer, n.TxManager = d, p, w, txm
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(t) })
	return n
}

// Close stops the poller, then drains the dispatcher; every outcome of a
// delivery is written when it returns. Only the first call does anything.
// A component that fails to close fails the test.
func (n *Node) Close(t testing.TB) {
	t.Helper()
	n.closed.Do(func() {
		if err := n.Poller.Close(context.Background()); err != nil {
			t.Errorf("close poller: %v", err)
		}
		if err := n.Dispatcher.Close(context.Background()); err != nil {
			t.Errorf("close dispatcher: %v", err)
		}
	})
}

// Write commits envs in one business transaction, through the node's writer
// and so its after-commit hook. It returns the error of the write or of the
// commit.
func (n *Node) Write(ctx context.Context, envs ...core.Envelope) error {
	return n.TxManager.Do(ctx, func(ctx context.Context) error {
		_, err := n.Writer.WriteAll(ctx, envs)
		return err
	})
}

// WriteForPoller commits envs in a plain *sql.Tx on db, with no after-commit
// hook: only a poller can deliver them. It fails the test on error.
func WriteForPoller(t testing.TB, st core.Store, db *sql.DB, envs ...core.Envelope) {
	t.Helper()
	w, err := core.NewWriter(core.WriterConfig{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAllTx(context.Background(), tx, envs); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// StatusCounts counts the rows of the outbox table by status. It fails the
// test on error.
func StatusCounts(t testing.TB, db core.DBTX, table string) map[core.Status]int {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "SELECT status, COUNT(*) FROM "+table+" GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[core.Status]int{}
	for rows.Next() {
		var st core.Status
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			t.Fatal(err)
		}
		out[st] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
