package pgxtx_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/pgxtx"
)

func TestMain(m *testing.M) {
	// Tx.QueryContext's *sql.DB keeps its connection opener for the life
	// of the process, by design.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("database/sql.(*DB).connectionOpener"))
}

// items makes a table of its own on the test's pool; it returns its name.
func items(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	name := testdb.UniqueName("items")
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+name+" (name TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+name) })
	return name
}

func count(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func newManager(t *testing.T, db pgxtx.Beginner, cfg pgxtx.Config) *pgxtx.Manager {
	t.Helper()
	m, err := pgxtx.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, fmt.Sprintf(format, args...))
}

func (r *recorder) want(t *testing.T, want ...string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if fmt.Sprint(r.got) != fmt.Sprint(want) {
		t.Fatalf("got %q, want %q", r.got, want)
	}
}

func TestNewValidates(t *testing.T) {
	var pool *pgxpool.Pool
	if _, err := pgxtx.New(pool, pgxtx.Config{}); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("nil pool: %v, want core.ErrInvalid", err)
	}
	if _, err := pgxtx.New(nil, pgxtx.Config{}); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("nil handle: %v, want core.ErrInvalid", err)
	}
}

func TestCommitRunsAfterCommitCallbacks(t *testing.T) {
	pool := testdb.PgxPool(t)
	table := items(t, pool)
	m := newManager(t, pool, pgxtx.Config{})
	var rec recorder
	err := m.Do(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		t2, ok := pgxtx.From(ctx)
		if !ok {
			t.Fatal("the context carries no pgxtx.Tx")
		}
		if ct, ok := core.TxFromContext(ctx); !ok || ct != core.Tx(t2) {
			t.Fatal("core.TxFromContext does not find the Tx")
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ($1)", "a"); err != nil {
			return err
		}
		// The Tx runs statements in the same transaction.
		if _, err := t2.ExecContext(ctx, "INSERT INTO "+table+" (name) VALUES ($1)", "b"); err != nil {
			return err
		}
		t2.AfterCommit(func(cbCtx context.Context) {
			if _, ok := pgxtx.From(cbCtx); ok {
				t.Error("the callback's context carries the ended transaction")
			}
			rec.add("after commit: %d rows", count(t, pool, table))
		})
		t2.AfterRollback(func(context.Context) { rec.add("after rollback") })
		rec.add("in tx: %d rows outside", count(t, pool, table))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rec.want(t, "in tx: 0 rows outside", "after commit: 2 rows")
}

func TestErrorRollsBack(t *testing.T) {
	pool := testdb.PgxPool(t)
	table := items(t, pool)
	m := newManager(t, pool, pgxtx.Config{})
	var rec recorder
	boom := errors.New("boom")
	err := m.Do(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ('a')"); err != nil {
			return err
		}
		t2, _ := pgxtx.From(ctx)
		t2.AfterCommit(func(context.Context) { rec.add("after commit") })
		t2.AfterRollback(func(context.Context) { rec.add("after rollback: %d rows", count(t, pool, table)) })
		return boom
	})
	if err != boom {
		t.Fatalf("Do returned %v, want fn's error unchanged", err)
	}
	rec.want(t, "after rollback: 0 rows")
}

func TestPanicRollsBackAndRepanics(t *testing.T) {
	pool := testdb.PgxPool(t)
	table := items(t, pool)
	m := newManager(t, pool, pgxtx.Config{})
	var rec recorder
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the panic to go on", r)
			}
		}()
		_ = m.Do(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ('a')"); err != nil {
				return err
			}
			t2, _ := pgxtx.From(ctx)
			t2.AfterRollback(func(context.Context) { rec.add("after rollback") })
			panic("kaboom")
		})
	}()
	rec.want(t, "after rollback")
	if n := count(t, pool, table); n != 0 {
		t.Fatalf("%d rows after a panic, want 0", n)
	}
}

func TestCommitAndRollbackBelongToDo(t *testing.T) {
	pool := testdb.PgxPool(t)
	table := items(t, pool)
	m := newManager(t, pool, pgxtx.Config{})
	err := m.Do(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ('a')"); err != nil {
			return err
		}
		if err := tx.Commit(ctx); !errors.Is(err, pgxtx.ErrManagedTx) {
			t.Errorf("Commit: %v, want ErrManagedTx", err)
		}
		if err := tx.Rollback(ctx); !errors.Is(err, pgxtx.ErrManagedTx) {
			t.Errorf("Rollback: %v, want ErrManagedTx", err)
		}
		// A nested transaction is a savepoint of its own to end.
		sp, err := tx.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := sp.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ('b')"); err != nil {
			return err
		}
		return sp.Rollback(ctx)
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	rows, _ := pool.Query(context.Background(), "SELECT name FROM "+table+" ORDER BY name")
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(names) != "[a]" {
		t.Fatalf("rows %v, want [a]: the transaction committed by Do, the savepoint rolled back", names)
	}
}

func TestFailedCommitRunsAfterRollback(t *testing.T) {
	pool := testdb.PgxPool(t)
	table := items(t, pool)
	m := newManager(t, pool, pgxtx.Config{})
	var rec recorder
	err := m.Do(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		t2, _ := pgxtx.From(ctx)
		t2.AfterCommit(func(context.Context) { rec.add("after commit") })
		t2.AfterRollback(func(context.Context) { rec.add("after rollback") })
		// A failed statement whose error fn drops: COMMIT rolls back.
		_, _ = tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES (NULL)")
		return nil
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) || !strings.Contains(err.Error(), "commit transaction") {
		t.Fatalf("Do: %v, want the commit's rollback", err)
	}
	rec.want(t, "after rollback")
}

func TestJoin(t *testing.T) {
	pool := testdb.PgxPool(t)
	other := testdb.PgxPool(t)
	table := items(t, pool)
	m := newManager(t, pool, pgxtx.Config{})
	same := newManager(t, pool, pgxtx.Config{})
	indep := newManager(t, other, pgxtx.Config{})
	var rec recorder
	boom := errors.New("inner failed")
	err := m.Do(context.Background(), func(ctx context.Context, outer pgx.Tx) error {
		outerTx, _ := pgxtx.From(ctx)
		outerTx.AfterCommit(func(context.Context) { rec.add("outer after commit") })
		err := same.Do(ctx, func(ctx context.Context, inner pgx.Tx) error {
			innerTx, _ := pgxtx.From(ctx)
			if innerTx != outerTx {
				t.Error("a Manager over the same pool did not join")
			}
			innerTx.AfterCommit(func(context.Context) { rec.add("inner after commit") })
			if _, err := inner.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ('joined')"); err != nil {
				return err
			}
			return boom
		})
		if err != boom {
			t.Errorf("joined Do returned %v, want fn's error unchanged", err)
		}
		// Another pool's Manager begins a transaction of its own, which
		// commits on its own.
		err = indep.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if t3, _ := pgxtx.From(ctx); t3 == outerTx {
				t.Error("a Manager over another pool joined")
			}
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ('independent')")
			return err
		})
		if err != nil {
			return err
		}
		rec.add("inside: %d rows committed", count(t, other, table))
		return nil // handles the inner error: everything commits
	})
	if err != nil {
		t.Fatal(err)
	}
	rec.want(t, "inside: 1 rows committed", "outer after commit", "inner after commit")
	if n := count(t, pool, table); n != 2 {
		t.Fatalf("%d rows, want 2", n)
	}

	// A context kept beyond its Do carries an ended transaction.
	var kept context.Context
	if err := m.Do(context.Background(), func(ctx context.Context, _ pgx.Tx) error { kept = ctx; return nil }); err != nil {
		t.Fatal(err)
	}
	err = m.Do(kept, func(context.Context, pgx.Tx) error { t.Error("fn ran in an ended transaction"); return nil })
	if !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("Do on an ended transaction's context: %v, want pgx.ErrTxClosed", err)
	}
}

func TestCancellation(t *testing.T) {
	pool := testdb.PgxPool(t)
	table := items(t, pool)
	m := newManager(t, pool, pgxtx.Config{})

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := m.Do(ctx, func(context.Context, pgx.Tx) error { t.Error("fn ran"); return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v, want context.Canceled", err)
	}

	// Cancelled after fn's last statement: Do still commits.
	ctx, cancel = context.WithCancel(context.Background())
	var rec recorder
	err = m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ('a')"); err != nil {
			return err
		}
		t2, _ := pgxtx.From(ctx)
		t2.AfterCommit(func(cbCtx context.Context) { rec.add("after commit, ctx err %v", cbCtx.Err()) })
		cancel()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rec.want(t, "after commit, ctx err <nil>")
	if n := count(t, pool, table); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}

func TestCallbacksAreLogged(t *testing.T) {
	pool := testdb.PgxPool(t)
	var buf syncBuffer
	m := newManager(t, pool, pgxtx.Config{Logger: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	var rec recorder
	var kept *pgxtx.Tx
	err := m.Do(context.Background(), func(ctx context.Context, _ pgx.Tx) error {
		kept, _ = pgxtx.From(ctx)
		kept.AfterCommit(func(context.Context) { panic("callback bug") })
		kept.AfterCommit(func(context.Context) { rec.add("second ran") })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rec.want(t, "second ran")
	kept.AfterCommit(func(context.Context) { rec.add("late ran") })
	rec.want(t, "second ran")
	for _, want := range []string{"transaction callback panicked", "callback bug", "registered on an ended transaction"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestTxOptions(t *testing.T) {
	pool := testdb.PgxPool(t)
	m := newManager(t, pool, pgxtx.Config{TxOptions: pgx.TxOptions{IsoLevel: pgx.Serializable, AccessMode: pgx.ReadOnly}})
	err := m.Do(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		var iso, ro string
		if err := tx.QueryRow(ctx, "SELECT current_setting('transaction_isolation'), current_setting('transaction_read_only')").Scan(&iso, &ro); err != nil {
			return err
		}
		if iso != "serializable" || ro != "on" {
			t.Errorf("isolation %q, read only %q; want serializable, on", iso, ro)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestQueryContext reads every common column type through the database/sql
// view of the transaction, and sees the transaction's own writes.
func TestQueryContext(t *testing.T) {
	pool := testdb.PgxPool(t)
	table := items(t, pool)
	m := newManager(t, pool, pgxtx.Config{})
	at := time.Date(2026, 11, 24, 10, 30, 0, 123456000, time.UTC)
	err := m.Do(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
		t2, _ := pgxtx.From(ctx)
		if _, err := t2.ExecContext(ctx, "INSERT INTO "+table+" (name) VALUES ($1), ($2)", "x", "y"); err != nil {
			return err
		}
		var (
			i16, i32, i64 int64
			f4, f8        float64
			text, num     string
			js, jsb, id   string
			raw           []byte
			ts            time.Time
			ok            bool
			null          *string
		)
		err := t2.QueryRowContext(ctx, `SELECT 1::int2, 2::int4, $1::int8, 1.5::float4, 2.25::float8, 'héllo'::text,
			12.50::numeric, '{"a": [1, "b"]}'::json, '{"a": [1, "b"]}'::jsonb,
			'6ba7b810-9dad-11d1-80b4-00c04fd430c8'::uuid, '\x00ff'::bytea, $2::timestamptz, true, NULL::text`,
			int64(1)<<40, at).
			Scan(&i16, &i32, &i64, &f4, &f8, &text, &num, &js, &jsb, &id, &raw, &ts, &ok, &null)
		if err != nil {
			return err
		}
		got := fmt.Sprint(i16, i32, i64, f4, f8, text, num, js, jsb, id, raw, ts.Equal(at), ok, null)
		want := fmt.Sprint(int64(1), int64(2), int64(1)<<40, 1.5, 2.25, "héllo", "12.50", `{"a": [1, "b"]}`, `{"a": [1, "b"]}`,
			"6ba7b810-9dad-11d1-80b4-00c04fd430c8", []byte{0, 0xff}, true, true, (*string)(nil))
		if got != want {
			t.Errorf("scanned %s\nwant    %s", got, want)
		}

		rows, err := t2.QueryContext(ctx, "SELECT name FROM "+table+" ORDER BY name")
		if err != nil {
			return err
		}
		defer rows.Close()
		var names []string
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				return err
			}
			names = append(names, n)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if fmt.Sprint(names) != "[x y]" {
			t.Errorf("rows %v, want the transaction's own [x y]", names)
		}

		var arr string
		err = t2.QueryRowContext(ctx, "SELECT ARRAY[1, 2] AS pair").Scan(&arr)
		if err == nil || !strings.Contains(err.Error(), "column pair") || !strings.Contains(err.Error(), "Tx.Pgx") {
			t.Errorf("array column: %v, want an error naming the column and Tx.Pgx", err)
		}
		// A failed query aborts the transaction, as it would with pgx.
		return nil
	})
	if err != nil && !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatal(err)
	}
}
