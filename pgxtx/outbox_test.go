package pgxtx_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/roundtrips"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/pgxtx"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/txctx"
)

// queueCount counts the events queued on the hot and the cold queue.
type queueCount struct {
	core.NopMetrics
	hot, cold atomic.Int64
}

func (q *queueCount) HotEnqueued()  { q.hot.Add(1) }
func (q *queueCount) ColdEnqueued() { q.cold.Add(1) }

func envelope(t *testing.T, aggType, aggID, eventType, id string) core.Envelope {
	t.Helper()
	env, err := core.NewEnvelope(core.EnvelopeSpec{
		ID: id, Type: core.EventName(eventType), AggregateType: core.AggregateName(aggType),
		AggregateID: aggID, JSON: []byte(`{"n":1}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// awaitAll waits up to 30 s for all to be closed, and fails the test with
// what status says when it is not.
func awaitAll(t *testing.T, all <-chan struct{}, status func() string) {
	t.Helper()
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatalf("after 30 s: %s", status())
	}
}

// startOutbox starts an Outbox on store whose background side runs on pool
// through pgx's database/sql adapter, with metrics counting the queues; it
// is closed when the test ends.
func startOutbox(t *testing.T, pool *pgxpool.Pool, store core.Store, reg *core.Registry) (*outbox.Outbox, *queueCount) {
	t.Helper()
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	metrics := &queueCount{}
	ob, err := outbox.New(outbox.Config{DB: db, Store: store, Registry: reg, Metrics: metrics, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ob.Close(context.Background()) })
	return ob, metrics
}

// TestOutboxOnPgxPool runs an Outbox whose writes happen in pgx
// transactions and whose background side runs on the same pgxpool: events
// committed with pgxtx reach their listener through the hot path, in key
// order for an ordered aggregate type; a rolled-back transaction delivers
// nothing; a duplicate id is reported as core.ErrDuplicateEvent.
func TestOutboxOnPgxPool(t *testing.T) {
	tg := testdb.Postgres(t)
	pool := testdb.PgxPool(t)
	var (
		mu  sync.Mutex
		got []string
	)
	all := make(chan struct{})
	want := 6
	reg := core.NewRegistry()
	record := func(ctx context.Context, ev core.Event) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, fmt.Sprintf("%s/%s %s seq %d", ev.AggregateType(), ev.AggregateID(), ev.Type(), ev.Seq))
		if len(got) == want {
			close(all)
		}
		return nil
	}
	for _, at := range []string{"Order", "Invoice"} {
		for _, et := range []string{"Placed", "Paid", "Shipped"} {
			if err := reg.RegisterFunc(core.AggregateName(at), core.EventName(et), record); err != nil {
				t.Fatal(err)
			}
		}
	}
	ob, metrics := startOutbox(t, pool, tg.Ordered, reg)
	ctx := context.Background()
	table := items(t, pool)
	txm := newManager(t, pool, pgxtx.Config{})
	// "Order" is ordered (storetest.Ordering, testdb's Target.Ordered): three events of one key in
	// one transaction; "Invoice" is not.
	err := txm.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ('o-1')"); err != nil {
			return err
		}
		_, err := ob.Writer().WriteAll(ctx, []core.Envelope{
			envelope(t, "Order", "o-1", "Placed", ""),
			envelope(t, "Order", "o-1", "Paid", ""),
			envelope(t, "Order", "o-1", "Shipped", ""),
			envelope(t, "Invoice", "i-1", "Placed", "dup-0000000000000000000001"),
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// Rolled back: nothing written, nothing delivered.
	boom := errors.New("business rule failed")
	err = txm.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := ob.Writer().Write(ctx, envelope(t, "Invoice", "i-2", "Placed", "")); err != nil {
			return err
		}
		return boom
	})
	if err != boom {
		t.Fatalf("rolled-back Do: %v", err)
	}

	// A duplicate id: the error says so, and a savepoint keeps the
	// transaction usable for what follows.
	err = txm.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		spCtx := ctx // the savepoint runs on the same connection and transaction
		_, err = ob.Writer().Write(spCtx, envelope(t, "Invoice", "i-1", "Paid", "dup-0000000000000000000001"))
		if !errors.Is(err, core.ErrDuplicateEvent) {
			t.Errorf("duplicate id: %v, want core.ErrDuplicateEvent", err)
		}
		if err := sp.Rollback(ctx); err != nil {
			return err
		}
		_, err = ob.Writer().Write(ctx, envelope(t, "Invoice", "i-1", "Paid", ""))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	// An event with a generated id, its INSERT held and sent with COMMIT
	// (the default): delivered by the hot path after that COMMIT.
	err = txm.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ($1)", "i-3"); err != nil {
			return err
		}
		_, err := ob.Writer().Write(ctx, envelope(t, "Invoice", "i-3", "Placed", ""))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}

	awaitAll(t, all, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("delivered %d of %d: %q", len(got), want, got)
	})
	mu.Lock()
	var order []string
	for _, g := range got {
		if g[:5] == "Order" {
			order = append(order, g)
		}
	}
	mu.Unlock()
	if fmt.Sprint(order) != "[Order/o-1 Placed seq 1 Order/o-1 Paid seq 2 Order/o-1 Shipped seq 3]" {
		t.Errorf("ordered key delivered as %q", order)
	}
	// Closing waits for the dispatcher and the poller, whose queue counts
	// follow their hand-offs (a delivery can come first).
	if err := ob.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// Everything went through the hot queue, nothing through the poller:
	// the head of the ordered key and the three invoices after their
	// COMMIT, and the key's two successors when their predecessor was DONE.
	if hot, cold := metrics.hot.Load(), metrics.cold.Load(); hot != 6 || cold != 0 {
		t.Errorf("hot/cold enqueued %d/%d, want 6/0", hot, cold)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tg.Table).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != want {
		t.Errorf("%d rows in the outbox, want %d (the rolled-back and duplicate writes left none)", rows, want)
	}
}

// TestDBTXOfYourOwnTx writes with a pgx transaction begun without pgxtx:
// the events commit with it and a poller delivers them (nothing runs after
// that COMMIT); a rolled-back one leaves nothing.
func TestDBTXOfYourOwnTx(t *testing.T) {
	tg := testdb.Postgres(t)
	pool := testdb.PgxPool(t)
	delivered := make(chan string, 2)
	reg := core.NewRegistry()
	err := reg.RegisterFunc(core.AggregateName("Order"), core.EventName("Placed"), func(ctx context.Context, ev core.Event) error {
		delivered <- ev.AggregateID()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ob, metrics := startOutbox(t, pool, tg.Store, reg)
	ctx := context.Background()

	write := func(id string, commit bool) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := ob.Writer().WriteTx(ctx, pgxtx.DBTX(tx), envelope(t, "Order", id, "Placed", "")); err != nil {
			t.Fatal(err)
		}
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	write("rolled-back", false)
	write("o-1", true)
	select {
	case id := <-delivered:
		if id != "o-1" {
			t.Fatalf("delivered %s, want o-1", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("o-1 not delivered in 30 s")
	}
	// Closing waits for the dispatcher and the poller, whose queue counts
	// follow their hand-offs (a delivery can come first).
	if err := ob.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if hot, cold := metrics.hot.Load(), metrics.cold.Load(); hot != 0 || cold != 1 {
		t.Errorf("hot/cold enqueued %d/%d, want 0/1: the poller delivers", hot, cold)
	}
	var rows int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+tg.Table).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Errorf("%d rows, want 1", rows)
	}
}

// TestPositionDeliveryOnPgx: in position delivery, the STREAM INSERT of
// events with generated ids goes with COMMIT too (two round trips for a
// business row and one event, or three in one INSERT), the hot path
// delivers them once the COMMIT's batch has returned their positions, and
// the reader, which may read a row first, delivers nothing again: every
// event once, through the hot path, and the saved position past them all.
// The same holds for txctx's Do on a pool of postgres.Open.
func TestPositionDeliveryOnPgx(t *testing.T) {
	t.Run("pgxtx", func(t *testing.T) { testPositionDeliveryHeld(t, false) })
	t.Run("postgres.Open", func(t *testing.T) { testPositionDeliveryHeld(t, true) })
}

func testPositionDeliveryHeld(t *testing.T, onSQL bool) {
	tg := testdb.Postgres(t)
	pool := testdb.PgxPool(t)
	var (
		mu   sync.Mutex
		got  = map[string]int{}
		want = 1 + 1 + 3 + 3 + 8*50
	)
	all := make(chan struct{})
	reg := core.NewRegistry()
	if err := reg.RegisterFunc(core.AggregateName("Invoice"), core.EventName("Placed"), func(_ context.Context, ev core.Event) error {
		mu.Lock()
		defer mu.Unlock()
		got[ev.ID()]++
		if len(got) == want {
			close(all)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { _ = db.Close() })
	metrics := &queueCount{}
	ob, err := outbox.New(outbox.Config{DB: db, Store: tg.Store, Registry: reg, Metrics: metrics,
		Delivery: outbox.DeliveryPosition, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ob.Start(ctx); err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = ob.Close(ctx)
		}
	})

	rec := &roundtrips.Recorder{}
	traced := tracedPool(t, rec)
	table := items(t, pool)
	write := func(m *pgxtx.Manager, name string, n ...int) error {
		envs := []core.Envelope{envelope(t, "Invoice", name, "Placed", "")}
		for i := range append(n, 1)[0] - 1 {
			envs = append(envs, envelope(t, "Invoice", fmt.Sprint(name, "-", i), "Placed", ""))
		}
		return m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ($1)", name); err != nil {
				return err
			}
			_, err := ob.Writer().WriteAll(ctx, envs)
			return err
		})
	}
	m := newManager(t, traced, pgxtx.Config{})
	many := newManager(t, pool, pgxtx.Config{})
	if onSQL {
		// The same writes in txctx's Do, on pools of postgres.Open.
		cfg := traced.Config().ConnConfig.Copy()
		sqlTraced := postgres.OpenDB(*cfg)
		sqlPool := postgres.OpenDB(*pool.Config().ConnConfig)
		t.Cleanup(func() { _ = sqlTraced.Close(); _ = sqlPool.Close() })
		sqlTraced.SetMaxOpenConns(1)
		sqlWrite := func(db *sql.DB) func(*pgxtx.Manager, string, ...int) error {
			tm, err := txctx.New(db, txctx.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return func(_ *pgxtx.Manager, name string, n ...int) error {
				envs := []core.Envelope{envelope(t, "Invoice", name, "Placed", "")}
				for i := range append(n, 1)[0] - 1 {
					envs = append(envs, envelope(t, "Invoice", fmt.Sprint(name, "-", i), "Placed", ""))
				}
				return tm.Do(ctx, func(ctx context.Context) error {
					tx, _ := txctx.From(ctx)
					if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (name) VALUES ($1)", name); err != nil {
						return err
					}
					_, err := ob.Writer().WriteAll(ctx, envs)
					return err
				})
			}
		}
		tracedWrite, poolWrite := sqlWrite(sqlTraced), sqlWrite(sqlPool)
		write = func(m *pgxtx.Manager, name string, n ...int) error {
			if m == many {
				return poolWrite(m, name, n...)
			}
			return tracedWrite(m, name, n...)
		}
	}
	if err := write(m, "warm"); err != nil { // prepares the statements
		t.Fatal(err)
	}
	rec.Start()
	if err := write(m, "traced"); err != nil {
		t.Fatal(err)
	}
	sent := rec.Stop()
	if len(sent) != 2 || !strings.HasPrefix(sent[1], `insert into "`+strings.ToLower(tg.Table)+`"`) ||
		!strings.Contains(sent[1], "returning pos") || !strings.HasSuffix(sent[1], " + commit") {
		t.Fatalf("round trips %q; want BEGIN with the business row, then the STREAM row with COMMIT", sent)
	}
	// Three events in one write: one multi-row INSERT, sent with COMMIT too.
	if err := write(m, "warm-3", 3); err != nil {
		t.Fatal(err)
	}
	rec.Start()
	if err := write(m, "traced-3", 3); err != nil {
		t.Fatal(err)
	}
	sent = rec.Stop()
	if len(sent) != 2 || !strings.Contains(sent[1], "returning event_id, pos + commit") {
		t.Fatalf("round trips %q; want BEGIN with the business row, then the three STREAM rows with COMMIT", sent)
	}

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := range 50 {
				if err := write(many, fmt.Sprintf("w%d-%d", w, i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	awaitAll(t, all, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("delivered %d of %d", len(got), want)
	})
	if err := ob.Close(ctx); err != nil {
		t.Fatal(err)
	}
	closed = true
	mu.Lock()
	for id, n := range got {
		if n != 1 {
			t.Errorf("%s delivered %d times", id, n)
		}
	}
	mu.Unlock()
	if hot := metrics.hot.Load(); hot != int64(want) {
		t.Errorf("%d events through the hot path, want all %d", hot, want)
	}
	var floor, maxPos int64
	st := tg.Store.(interface{ PosTable() string })
	if err := pool.QueryRow(ctx, "SELECT floor_pos FROM "+st.PosTable()).Scan(&floor); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT max(pos) FROM "+tg.Table).Scan(&maxPos); err != nil {
		t.Fatal(err)
	}
	if floor != maxPos {
		t.Errorf("saved floor %d, want the last position %d: every event resolved", floor, maxPos)
	}
}
