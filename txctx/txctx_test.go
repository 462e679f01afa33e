package txctx_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jmoiron/sqlx"
	_ "modernc.org/sqlite"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/txctx"
)

// openDB opens a fresh WAL-mode SQLite database in a temporary directory with
// an item table, and returns it with its file path.
func openDB(t *testing.T, pragmas ...string) (*sql.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "txctx.db")
	db := openPath(t, path, pragmas...)
	mustExec(t, db, "CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT NOT NULL)")
	return db, path
}

// openPath opens another pool on the database file at path.
func openPath(t *testing.T, path string, pragmas ...string) *sql.DB {
	t.Helper()
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)"
	for _, p := range pragmas {
		dsn += "&_pragma=" + p
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func mustExec(t *testing.T, db core.DBTX, query string, args ...any) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func newManager(t *testing.T, db core.TxBeginner, cfg txctx.Config) *txctx.Manager {
	t.Helper()
	m, err := txctx.New(db, cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// countItems counts the committed rows of item named name, as db sees them.
func countItems(t *testing.T, db core.DBTX, name string) int {
	t.Helper()
	var n int
	err := db.QueryRowContext(context.Background(), "SELECT count(*) FROM item WHERE name = ?", name).Scan(&n)
	if err != nil {
		t.Fatalf("count items: %v", err)
	}
	return n
}

// insertItem inserts an item named name in the transaction ctx carries.
func insertItem(ctx context.Context, name string) error {
	tx, ok := txctx.From(ctx)
	if !ok {
		return errors.New("no txctx transaction in context")
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO item (name) VALUES (?)", name)
	return err
}

// recorder collects what happened, in order, from any goroutine.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recorder) want(t *testing.T, want ...string) {
	t.Helper()
	if got := r.get(); !slices.Equal(got, want) {
		t.Fatalf("events:\n got %q\nwant %q", got, want)
	}
}

// catchPanic runs f and returns the value it panicked with, or nil.
func catchPanic(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// syncBuffer is a log sink that callbacks in any goroutine may write to.
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

func TestNewRejectsNilHandle(t *testing.T) {
	t.Parallel()
	for name, db := range map[string]core.TxBeginner{
		"nil interface": nil,
		"nil *sql.DB":   (*sql.DB)(nil),
		"nil *sqlx.DB":  (*sqlx.DB)(nil),
	} {
		if _, err := txctx.New(db, txctx.Config{}); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("%s: New error = %v, want ErrInvalid", name, err)
		}
	}
}

func TestDoRejectsNilFunc(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	m := newManager(t, db, txctx.Config{})
	if err := m.Do(context.Background(), nil); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("Do(nil) = %v, want ErrInvalid", err)
	}
}

func TestContextCarriesTx(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	m := newManager(t, db, txctx.Config{})
	ctx := context.Background()
	if _, ok := core.TxFromContext(ctx); ok {
		t.Fatal("background context carries a transaction")
	}
	err := m.Do(ctx, func(ctx context.Context) error {
		coreTx, ok := core.TxFromContext(ctx)
		if !ok {
			return errors.New("core.TxFromContext found no transaction")
		}
		tx, ok := txctx.From(ctx)
		if !ok {
			return errors.New("txctx.From found no transaction")
		}
		if coreTx != core.Tx(tx) {
			return errors.New("core.TxFromContext and txctx.From disagree")
		}
		if tx.SQLTx() == nil {
			return errors.New("SQLTx is nil")
		}
		if tx.Sqlx() != nil {
			return errors.New("Sqlx is not nil on a plain *sql.DB manager")
		}
		var one int
		if err := tx.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, "SELECT 1")
		if err != nil {
			return err
		}
		return rows.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestCommitRunsAfterCommitCallbacksAfterCommit(t *testing.T) {
	t.Parallel()
	db, path := openDB(t)
	other := openPath(t, path) // a second pool: its connections see only committed rows
	m := newManager(t, db, txctx.Config{})
	var rec recorder

	err := m.Do(context.Background(), func(ctx context.Context) error {
		if err := insertItem(ctx, "a"); err != nil {
			return err
		}
		tx, _ := txctx.From(ctx)
		for i := range 3 {
			tx.AfterCommit(func(ctx context.Context) {
				_, carried := core.TxFromContext(ctx)
				rec.add("commit %d: visible=%d carried=%v", i, countItems(t, other, "a"), carried)
			})
		}
		tx.AfterRollback(func(context.Context) { rec.add("rollback") })
		rec.add("fn: visible=%d", countItems(t, other, "a"))
		return nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	rec.want(t,
		"fn: visible=0",
		"commit 0: visible=1 carried=false",
		"commit 1: visible=1 carried=false",
		"commit 2: visible=1 carried=false",
	)
}

func TestAfterCommitCallbackWritesInItsOwnTransaction(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	m := newManager(t, db, txctx.Config{})
	// The Writer never reaches its store here: without a transaction in ctx
	// it fails first.
	w, err := core.NewWriter(core.WriterConfig{Store: unusedStore{}})
	if err != nil {
		t.Fatal(err)
	}
	env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("ItemAdded"), JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	var writeErr, nestedErr error
	err = m.Do(context.Background(), func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		tx.AfterCommit(func(ctx context.Context) {
			_, writeErr = w.Write(ctx, env)
			nestedErr = m.Do(ctx, func(ctx context.Context) error { return insertItem(ctx, "follow-up") })
		})
		return insertItem(ctx, "first")
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if !errors.Is(writeErr, core.ErrNoTransaction) {
		t.Errorf("Writer.Write in after-commit callback = %v, want ErrNoTransaction", writeErr)
	}
	if nestedErr != nil {
		t.Errorf("Do in after-commit callback: %v", nestedErr)
	}
	if n := countItems(t, db, "follow-up"); n != 1 {
		t.Errorf("follow-up rows = %d, want 1", n)
	}
}

// unusedStore satisfies core.Store for a Writer whose store is never called.
type unusedStore struct{ core.Store }

func TestErrorRollsBack(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	m := newManager(t, db, txctx.Config{})
	var rec recorder
	errBusiness := errors.New("business rule violated")

	err := m.Do(context.Background(), func(ctx context.Context) error {
		if err := insertItem(ctx, "a"); err != nil {
			return err
		}
		tx, _ := txctx.From(ctx)
		tx.AfterCommit(func(context.Context) { rec.add("commit") })
		tx.AfterRollback(func(ctx context.Context) {
			_, carried := core.TxFromContext(ctx)
			rec.add("rollback: visible=%d carried=%v", countItems(t, db, "a"), carried)
		})
		return errBusiness
	})
	if err != errBusiness { //nolint:errorlint // Do returns fn's error unchanged.
		t.Fatalf("Do = %v, want fn's error unchanged", err)
	}
	rec.want(t, "rollback: visible=0 carried=false")
}

func TestPanicRollsBackAndRepanics(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	m := newManager(t, db, txctx.Config{})
	var rec recorder

	v := catchPanic(func() {
		_ = m.Do(context.Background(), func(ctx context.Context) error {
			if err := insertItem(ctx, "a"); err != nil {
				return err
			}
			tx, _ := txctx.From(ctx)
			tx.AfterCommit(func(context.Context) { rec.add("commit") })
			tx.AfterRollback(func(context.Context) { rec.add("rollback: visible=%d", countItems(t, db, "a")) })
			panic("boom")
		})
		rec.add("Do returned")
	})
	if v != "boom" {
		t.Fatalf("recovered %v, want the original panic value", v)
	}
	rec.want(t, "rollback: visible=0")
	// The connection went back to the pool in a usable state.
	if err := m.Do(context.Background(), func(ctx context.Context) error { return insertItem(ctx, "b") }); err != nil {
		t.Fatalf("Do after panic: %v", err)
	}
	if n := countItems(t, db, "b"); n != 1 {
		t.Fatalf("rows after panic = %d, want 1", n)
	}
}

func TestGoexitRollsBack(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	m := newManager(t, db, txctx.Config{})
	var rec recorder
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Do(context.Background(), func(ctx context.Context) error {
			tx, _ := txctx.From(ctx)
			tx.AfterRollback(func(context.Context) { rec.add("rollback") })
			if err := insertItem(ctx, "a"); err != nil {
				return err
			}
			runtime.Goexit() // what t.FailNow does inside fn
			return nil
		})
	}()
	<-done
	rec.want(t, "rollback")
	if n := countItems(t, db, "a"); n != 0 {
		t.Fatalf("rows = %d, want 0", n)
	}
}

func TestCallbackPanicsAreRecoveredAndLogged(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	var logs syncBuffer
	m := newManager(t, db, txctx.Config{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	t.Run("after commit", func(t *testing.T) {
		var rec recorder
		err := m.Do(context.Background(), func(ctx context.Context) error {
			tx, _ := txctx.From(ctx)
			tx.AfterCommit(func(context.Context) { rec.add("first") })
			tx.AfterCommit(func(context.Context) { panic("callback boom") })
			tx.AfterCommit(func(context.Context) { rec.add("third") })
			return insertItem(ctx, "a")
		})
		if err != nil {
			t.Fatalf("Do = %v, want nil despite the callback panic", err)
		}
		rec.want(t, "first", "third")
		if out := logs.String(); !strings.Contains(out, "callback boom") || !strings.Contains(out, "after commit") {
			t.Fatalf("log does not report the callback panic: %s", out)
		}
	})

	t.Run("after rollback while fn panics", func(t *testing.T) {
		var rec recorder
		v := catchPanic(func() {
			_ = m.Do(context.Background(), func(ctx context.Context) error {
				tx, _ := txctx.From(ctx)
				tx.AfterRollback(func(context.Context) { panic("callback boom") })
				tx.AfterRollback(func(context.Context) { rec.add("second") })
				panic("fn boom")
			})
		})
		if v != "fn boom" {
			t.Fatalf("recovered %v, want fn's panic", v)
		}
		rec.want(t, "second")
	})
}

func TestCancelDuringFnRollsBack(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	m := newManager(t, db, txctx.Config{})
	var rec recorder
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	err := m.Do(ctx, func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		tx.AfterCommit(func(context.Context) { rec.add("commit") })
		tx.AfterRollback(func(ctx context.Context) { rec.add("rollback: ctx err=%v", ctx.Err()) })
		if err := insertItem(ctx, "a"); err != nil {
			return err
		}
		cancel()
		return insertItem(ctx, "b")
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want context.Canceled", err)
	}
	rec.want(t, "rollback: ctx err=<nil>")
	if n := countItems(t, db, "a"); n != 0 {
		t.Fatalf("rows = %d, want 0", n)
	}
}

func TestCancelAfterFnSucceededStillCommits(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	m := newManager(t, db, txctx.Config{})
	var rec recorder
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	err := m.Do(ctx, func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		tx.AfterCommit(func(ctx context.Context) { rec.add("commit: ctx err=%v", ctx.Err()) })
		if err := insertItem(ctx, "a"); err != nil {
			return err
		}
		cancel()
		return nil
	})
	if err != nil {
		t.Fatalf("Do = %v, want nil", err)
	}
	rec.want(t, "commit: ctx err=<nil>")
	if n := countItems(t, db, "a"); n != 1 {
		t.Fatalf("rows = %d, want 1", n)
	}
}

func TestCancelledContextBeginsNothing(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	m := newManager(t, db, txctx.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	err := m.Do(ctx, func(context.Context) error { called = true; return nil })
	if !errors.Is(err, context.Canceled) || called {
		t.Fatalf("Do = %v (fn called: %v), want context.Canceled and fn not called", err, called)
	}
}

func TestCancelWhileWaitingForConnection(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	db.SetMaxOpenConns(1)
	m := newManager(t, db, txctx.Config{})
	conn, err := db.Conn(context.Background()) // takes the only connection
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	result := make(chan error, 1)
	called := make(chan struct{}, 1)
	go func() {
		result <- m.Do(ctx, func(context.Context) error { called <- struct{}{}; return nil })
	}()
	for db.Stats().WaitCount == 0 { // Do is queued for the connection
		runtime.Gosched()
	}
	cancel()
	if err := <-result; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want context.Canceled", err)
	}
	if len(called) != 0 {
		t.Fatal("fn ran although BEGIN was cancelled")
	}
	if err := conn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Do(context.Background(), func(ctx context.Context) error { return insertItem(ctx, "a") }); err != nil {
		t.Fatalf("Do after release: %v", err)
	}
}

func TestFailedCommitRunsAfterRollback(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t, "foreign_keys(1)")
	mustExec(t, db, "CREATE TABLE parent (id INTEGER PRIMARY KEY)")
	mustExec(t, db, `CREATE TABLE child (
		id INTEGER PRIMARY KEY,
		parent_id INTEGER NOT NULL REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)`)
	m := newManager(t, db, txctx.Config{})
	var rec recorder

	err := m.Do(context.Background(), func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		tx.AfterCommit(func(context.Context) { rec.add("commit") })
		tx.AfterRollback(func(context.Context) { rec.add("rollback") })
		// The foreign key is checked only at COMMIT, which therefore fails.
		_, err := tx.ExecContext(ctx, "INSERT INTO child (id, parent_id) VALUES (1, 42)")
		return err
	})
	if err == nil || !strings.HasPrefix(err.Error(), "commit transaction: ") {
		t.Fatalf("Do = %v, want a commit error", err)
	}
	rec.want(t, "rollback")
	var n int
	if err := db.QueryRow("SELECT count(*) FROM child").Scan(&n); err != nil || n != 0 {
		t.Fatalf("child rows = %d (%v), want 0", n, err)
	}
	// The connection is clean: a later transaction commits normally.
	if err := m.Do(context.Background(), func(ctx context.Context) error { return insertItem(ctx, "a") }); err != nil {
		t.Fatalf("Do after failed commit: %v", err)
	}
}

func TestJoin(t *testing.T) {
	t.Parallel()

	t.Run("inner error goes to outer, which may still commit", func(t *testing.T) {
		t.Parallel()
		db, _ := openDB(t)
		m := newManager(t, db, txctx.Config{})
		var rec recorder
		errInner := errors.New("inner failed")

		err := m.Do(context.Background(), func(ctx context.Context) error {
			outer, _ := txctx.From(ctx)
			outer.AfterCommit(func(context.Context) { rec.add("outer commit") })
			innerErr := m.Do(ctx, func(ctx context.Context) error {
				inner, _ := txctx.From(ctx)
				if inner != outer {
					return errors.New("inner Do began a new transaction")
				}
				inner.AfterCommit(func(context.Context) { rec.add("inner commit") })
				if err := insertItem(ctx, "inner"); err != nil {
					return err
				}
				return errInner
			})
			if innerErr != errInner { //nolint:errorlint // joined Do returns fn's error unchanged.
				return fmt.Errorf("inner Do = %v, want the inner error unchanged", innerErr)
			}
			rec.add("outer fn saw inner error")
			return insertItem(ctx, "outer")
		})
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		rec.want(t, "outer fn saw inner error", "outer commit", "inner commit")
		if n := countItems(t, db, "inner") + countItems(t, db, "outer"); n != 2 {
			t.Fatalf("rows = %d, want 2 (the inner error rolled nothing back)", n)
		}
	})

	t.Run("outer rollback undoes inner work and runs inner callbacks", func(t *testing.T) {
		t.Parallel()
		db, _ := openDB(t)
		m := newManager(t, db, txctx.Config{})
		var rec recorder

		err := m.Do(context.Background(), func(ctx context.Context) error {
			return m.Do(ctx, func(ctx context.Context) error {
				tx, _ := txctx.From(ctx)
				tx.AfterCommit(func(context.Context) { rec.add("inner commit") })
				tx.AfterRollback(func(context.Context) { rec.add("inner rollback") })
				if err := insertItem(ctx, "inner"); err != nil {
					return err
				}
				return errors.New("inner failed")
			})
		})
		if err == nil {
			t.Fatal("Do = nil, want the inner error")
		}
		rec.want(t, "inner rollback")
		if n := countItems(t, db, "inner"); n != 0 {
			t.Fatalf("rows = %d, want 0", n)
		}
	})

	t.Run("inner panic passes through to outer", func(t *testing.T) {
		t.Parallel()
		db, _ := openDB(t)
		m := newManager(t, db, txctx.Config{})
		var rec recorder
		v := catchPanic(func() {
			_ = m.Do(context.Background(), func(ctx context.Context) error {
				tx, _ := txctx.From(ctx)
				tx.AfterRollback(func(context.Context) { rec.add("rollback") })
				_ = m.Do(ctx, func(ctx context.Context) error {
					if err := insertItem(ctx, "inner"); err != nil {
						return err
					}
					panic("inner boom")
				})
				rec.add("outer continued")
				return nil
			})
		})
		if v != "inner boom" {
			t.Fatalf("recovered %v, want the inner panic", v)
		}
		rec.want(t, "rollback")
		if n := countItems(t, db, "inner"); n != 0 {
			t.Fatalf("rows = %d, want 0", n)
		}
	})

	t.Run("managers over the same handle join", func(t *testing.T) {
		t.Parallel()
		db, _ := openDB(t)
		xdb := sqlx.NewDb(db, "sqlite")
		plain := newManager(t, db, txctx.Config{})
		readOnly := newManager(t, xdb, txctx.Config{TxOptions: &sql.TxOptions{ReadOnly: true}})

		err := plain.Do(context.Background(), func(ctx context.Context) error {
			outer, _ := txctx.From(ctx)
			return readOnly.Do(ctx, func(ctx context.Context) error {
				if inner, _ := txctx.From(ctx); inner != outer {
					return errors.New("managers over one handle did not join")
				}
				return insertItem(ctx, "joined") // the outer transaction's options apply
			})
		})
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		if n := countItems(t, db, "joined"); n != 1 {
			t.Fatalf("rows = %d, want 1", n)
		}
	})

	t.Run("a different handle begins an independent transaction", func(t *testing.T) {
		t.Parallel()
		dbA, _ := openDB(t)
		dbB, _ := openDB(t)
		mA := newManager(t, dbA, txctx.Config{})
		mB := newManager(t, dbB, txctx.Config{})
		var rec recorder

		err := mA.Do(context.Background(), func(ctx context.Context) error {
			outer, _ := txctx.From(ctx)
			if err := insertItem(ctx, "a"); err != nil {
				return err
			}
			err := mB.Do(ctx, func(ctx context.Context) error {
				inner, _ := txctx.From(ctx)
				if inner == outer {
					return errors.New("joined a transaction of another handle")
				}
				inner.AfterCommit(func(ctx context.Context) {
					// The outer transaction is still running; the callback's
					// context carries it, not the finished inner one.
					tx, _ := txctx.From(ctx)
					rec.add("inner commit: carries outer=%v", tx == outer)
				})
				return insertItem(ctx, "b")
			})
			if err != nil {
				return err
			}
			if tx, _ := txctx.From(ctx); tx != outer {
				return errors.New("outer context lost its transaction")
			}
			return errors.New("outer fails after inner committed")
		})
		if err == nil {
			t.Fatal("Do = nil, want the outer error")
		}
		rec.want(t, "inner commit: carries outer=true")
		if a, b := countItems(t, dbA, "a"), countItems(t, dbB, "b"); a != 0 || b != 1 {
			t.Fatalf("rows a=%d b=%d, want a=0 (rolled back) b=1 (committed on its own)", a, b)
		}
	})

	t.Run("a context kept beyond its Do does not join the ended transaction", func(t *testing.T) {
		t.Parallel()
		db, _ := openDB(t)
		m := newManager(t, db, txctx.Config{})
		var kept context.Context
		if err := m.Do(context.Background(), func(ctx context.Context) error { kept = ctx; return nil }); err != nil {
			t.Fatal(err)
		}
		called := false
		err := m.Do(kept, func(context.Context) error { called = true; return nil })
		if !errors.Is(err, sql.ErrTxDone) || called {
			t.Fatalf("Do(kept ctx) = %v (fn called: %v), want sql.ErrTxDone and fn not called", err, called)
		}
		tx, _ := txctx.From(kept)
		if _, err := tx.ExecContext(context.Background(), "INSERT INTO item (name) VALUES ('late')"); !errors.Is(err, sql.ErrTxDone) {
			t.Fatalf("statement on ended Tx = %v, want sql.ErrTxDone", err)
		}
	})
}

func TestCallbackRegisteredAfterEndNeverRuns(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	var logs syncBuffer
	m := newManager(t, db, txctx.Config{Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	var rec recorder

	var tx *txctx.Tx
	err := m.Do(context.Background(), func(ctx context.Context) error {
		tx, _ = txctx.From(ctx)
		tx.AfterCommit(func(context.Context) {
			// Registering on the transaction whose callbacks are running.
			tx.AfterCommit(func(context.Context) { rec.add("registered in callback") })
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tx.AfterCommit(func(context.Context) { rec.add("late commit") })
	tx.AfterRollback(func(context.Context) { rec.add("late rollback") })
	rec.want(t)
	if got := strings.Count(logs.String(), "ended transaction is dropped"); got != 3 {
		t.Fatalf("logged %d dropped registrations, want 3:\n%s", got, logs.String())
	}
}

func TestConcurrentCallbackRegistration(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	m := newManager(t, db, txctx.Config{})
	const n = 64
	var rec recorder
	err := m.Do(context.Background(), func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				tx.AfterCommit(func(context.Context) { rec.add("commit %d", i) })
				tx.AfterRollback(func(context.Context) { rec.add("rollback %d", i) })
			})
		}
		wg.Wait()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := rec.get()
	if len(got) != n {
		t.Fatalf("ran %d callbacks, want %d", len(got), n)
	}
	for _, e := range got {
		if !strings.HasPrefix(e, "commit ") {
			t.Fatalf("unexpected callback %q", e)
		}
	}
}

func TestSqlx(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	xdb := sqlx.NewDb(db, "sqlite")
	m := newManager(t, xdb, txctx.Config{})

	type item struct {
		ID   int64  `db:"id"`
		Name string `db:"name"`
	}
	var got item
	err := m.Do(context.Background(), func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		xtx := tx.Sqlx()
		if xtx == nil {
			return errors.New("Sqlx is nil on a *sqlx.DB manager")
		}
		if xtx.Tx != tx.SQLTx() {
			return errors.New("Sqlx and SQLTx are different transactions")
		}
		if xtx.DriverName() != "sqlite" {
			return fmt.Errorf("driver name %q, want sqlite", xtx.DriverName())
		}
		if _, err := xtx.ExecContext(ctx, "INSERT INTO item (name) VALUES (?)", "x"); err != nil {
			return err
		}
		return xtx.GetContext(ctx, &got, "SELECT id, name FROM item WHERE name = ?", "x")
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if got.Name != "x" || got.ID == 0 {
		t.Fatalf("got %+v", got)
	}
	if n := countItems(t, xdb, "x"); n != 1 {
		t.Fatalf("rows = %d, want 1", n)
	}
}

func TestSQLConn(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := newManager(t, conn, txctx.Config{})
	for _, name := range []string{"a", "b"} { // the connection is reusable after each transaction
		if err := m.Do(context.Background(), func(ctx context.Context) error { return insertItem(ctx, name) }); err != nil {
			t.Fatalf("Do on *sql.Conn: %v", err)
		}
	}
	if n := countItems(t, conn, "a") + countItems(t, conn, "b"); n != 2 {
		t.Fatalf("rows = %d, want 2", n)
	}
}

// optionsRecorder is a real *sql.DB that remembers the options BeginTx got.
type optionsRecorder struct {
	*sql.DB
	mu   sync.Mutex
	got  []*sql.TxOptions
	fail error
}

func (r *optionsRecorder) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	r.mu.Lock()
	r.got = append(r.got, opts)
	r.mu.Unlock()
	if r.fail != nil {
		return nil, r.fail
	}
	return r.DB.BeginTx(ctx, opts)
}

func TestTxOptions(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	rec := &optionsRecorder{DB: db}
	opts := &sql.TxOptions{Isolation: sql.LevelSerializable}
	m := newManager(t, rec, txctx.Config{TxOptions: opts})
	opts.ReadOnly = true // New copied the options

	if err := m.Do(context.Background(), func(ctx context.Context) error { return insertItem(ctx, "a") }); err != nil {
		t.Fatal(err)
	}
	if len(rec.got) != 1 || *rec.got[0] != (sql.TxOptions{Isolation: sql.LevelSerializable}) {
		t.Fatalf("BeginTx options = %+v", rec.got)
	}
}

func TestBeginErrorIsWrapped(t *testing.T) {
	t.Parallel()
	db, _ := openDB(t)
	errRefused := errors.New("refused")
	m := newManager(t, &optionsRecorder{DB: db, fail: errRefused}, txctx.Config{})
	called := false
	err := m.Do(context.Background(), func(context.Context) error { called = true; return nil })
	if !errors.Is(err, errRefused) || !strings.HasPrefix(err.Error(), "begin transaction: ") || called {
		t.Fatalf("Do = %v (fn called: %v), want wrapped begin error", err, called)
	}
}
