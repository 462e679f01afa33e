package core_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/txctx"
)

// notifying adds core.InsertNotifier to a store and counts the calls.
type notifying struct {
	core.Store
	calls atomic.Int32
	err   error
}

func (n *notifying) NotifyInsert(context.Context, core.DBTX) error {
	n.calls.Add(1)
	return n.err
}

// wrapped hides its store's capabilities except through Unwrap.
type wrapped struct{ core.Store }

func (w wrapped) Unwrap() core.Store { return w.Store }

// TestWriterNotifies: a write whose events no hot path in this process will
// deliver sends one notification in its transaction; a write leased by a
// LeasingHook and committed with callbacks sends none.
func TestWriterNotifies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		hook     core.WriterHook
		plainTx  bool // WriteTx on a plain *sql.Tx instead of a core.Tx
		noNotify bool
		unwrap   bool // the notifier is behind a wrapper with Unwrap
		want     int32
	}{
		{name: "no hook", want: 1},
		{name: "no hook, through a wrapper", unwrap: true, want: 1},
		{name: "non-leasing hook", hook: &recorder{}, want: 1},
		{name: "leasing hook: the hot path delivers", hook: leasing{&recorder{owner: "proc-1"}}, want: 0},
		{name: "leasing hook, plain transaction", hook: leasing{&recorder{owner: "proc-1"}}, plainTx: true, want: 1},
		{name: "NoNotify", noNotify: true, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tg := testdb.SQLite(t)
			n := &notifying{Store: tg.Store}
			var st core.Store = n
			if tt.unwrap {
				st = wrapped{n}
			}
			w, err := core.NewWriter(core.WriterConfig{Store: st, Hook: tt.hook, NoNotify: tt.noNotify})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if tt.plainTx {
				tx, err := tg.DB.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.WriteAllTx(ctx, tx, []core.Envelope{mustEnv(t, "a"), mustEnv(t, "b")}); err != nil {
					_ = tx.Rollback()
					t.Fatal(err)
				}
				if err := tx.Commit(); err != nil {
					t.Fatal(err)
				}
			} else {
				m, err := txctx.New(tg.DB, txctx.Config{})
				if err != nil {
					t.Fatal(err)
				}
				err = m.Do(ctx, func(ctx context.Context) error {
					_, err := w.WriteAll(ctx, []core.Envelope{mustEnv(t, "a"), mustEnv(t, "b")})
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			if got := n.calls.Load(); got != tt.want {
				t.Fatalf("notifications for one write of two events = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestWriterNotifyFailureFailsTheWrite: on PostgreSQL a failed statement
// aborts the transaction, so a failed notification is the write's error.
func TestWriterNotifyFailureFailsTheWrite(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	boom := errors.New("boom")
	w, err := core.NewWriter(core.WriterConfig{Store: &notifying{Store: tg.Store, err: boom}})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := tg.DB.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := w.WriteTx(context.Background(), tx, mustEnv(t, "a")); !errors.Is(err, boom) {
		t.Fatalf("WriteTx with a failing notification: err = %v, want boom", err)
	}
}

// TestWriterNotifiesOncePerTransaction: several writes in one txctx
// transaction send one notification; the next transaction sends its own.
func TestWriterNotifiesOncePerTransaction(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	n := &notifying{Store: tg.Store}
	w, err := core.NewWriter(core.WriterConfig{Store: n})
	if err != nil {
		t.Fatal(err)
	}
	m, err := txctx.New(tg.DB, txctx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for round, ids := range [][]string{{"a", "b", "c"}, {"d", "e"}} {
		err := m.Do(context.Background(), func(ctx context.Context) error {
			for _, id := range ids {
				if _, err := w.Write(ctx, mustEnv(t, id)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.calls.Load(); got != int32(round+1) {
			t.Fatalf("notifications after %d transactions = %d, want %d", round+1, got, round+1)
		}
	}
}

// notifyingOrdered is notifying over an ordered store.
type notifyingOrdered struct {
	notifying
	core.OrderedStore
}

func (n *notifyingOrdered) Unwrap() core.Store { return n.notifying.Store }

// TestWriterNotifiesNoWaitingWrite: a write whose events are all stored
// WAITING behind an earlier event of their key sends no notification (no
// claim reads them; the key's finisher promotes and delivers them); a write
// that starts a key does.
func TestWriterNotifiesNoWaitingWrite(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	ord, ok := core.StoreAs[core.OrderedStore](tg.Ordered)
	if !ok {
		t.Fatalf("%T is not ordered", tg.Ordered)
	}
	n := &notifyingOrdered{notifying: notifying{Store: tg.Ordered}, OrderedStore: ord}
	w, err := core.NewWriter(core.WriterConfig{Store: n})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, want := range []int32{1, 1} { // the key's head, then an event waiting behind it
		tx, err := tg.DB.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		e, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("Placed"), AggregateType: core.AggregateName("Order"),
			AggregateID: "k", JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteTx(ctx, tx, e); err != nil {
			_ = tx.Rollback()
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := n.calls.Load(); got != want {
			t.Fatalf("after write %d: %d notifications, want %d", i+1, got, want)
		}
	}
}
