package ormtx_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/ormtx"
	"github.com/outboxkit/outbox/store/sqlite"
)

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := db.Exec("CREATE TABLE items (id TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	return db
}

func beginOn(db *sql.DB) func(ctx context.Context) (ormtx.Begun, error) {
	return func(ctx context.Context) (ormtx.Begun, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return ormtx.Begun{}, err
		}
		return ormtx.Begun{End: tx, Exec: tx, ORM: tx, Key: db}, nil
	}
}

func count(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM items").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestDoCommitRollbackPanicJoin(t *testing.T) {
	db := openDB(t)
	ctx := context.Background()
	var got []string
	insert := func(id string) func(ctx context.Context, tx *ormtx.Tx) error {
		return func(ctx context.Context, tx *ormtx.Tx) error {
			if c, ok := core.TxFromContext(ctx); !ok || c != core.Tx(tx) {
				t.Errorf("ctx does not carry the transaction")
			}
			tx.AfterCommit(func(context.Context) { got = append(got, "commit "+id) })
			tx.AfterRollback(func(context.Context) { got = append(got, "rollback "+id) })
			_, err := tx.ExecContext(ctx, "INSERT INTO items (id) VALUES (?)", id)
			return err
		}
	}

	if err := ormtx.Do(ctx, db, beginOn(db), insert("a")); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := ormtx.Do(ctx, db, beginOn(db), func(ctx context.Context, tx *ormtx.Tx) error {
		if err := insert("b")(ctx, tx); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want boom", err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("panic did not go on")
			}
		}()
		_ = ormtx.Do(ctx, db, beginOn(db), func(ctx context.Context, tx *ormtx.Tx) error {
			_ = insert("c")(ctx, tx)
			panic("listener bug")
		})
	}()
	// Joined: the inner Do neither begins (SQLite has one connection: a
	// second BEGIN would wait forever) nor ends the transaction.
	err = ormtx.Do(ctx, db, beginOn(db), func(ctx context.Context, outer *ormtx.Tx) error {
		return ormtx.Do(ctx, db, beginOn(db), func(ctx context.Context, inner *ormtx.Tx) error {
			if inner != outer {
				t.Error("inner Do did not join")
			}
			return insert("d")(ctx, inner)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"commit a", "rollback b", "rollback c", "commit d"}
	if !slices.Equal(got, want) {
		t.Fatalf("callbacks = %q, want %q", got, want)
	}
	if n := count(t, db); n != 2 {
		t.Fatalf("rows = %d, want 2 (a, d)", n)
	}
}

func TestDoCancelledAndFailedCommit(t *testing.T) {
	db := openDB(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	err := ormtx.Do(ctx, db, beginOn(db), func(context.Context, *ormtx.Tx) error { called = true; return nil })
	if !errors.Is(err, context.Canceled) || called {
		t.Fatalf("cancelled ctx: err = %v, fn called %v", err, called)
	}

	// A COMMIT that fails runs the after-rollback callbacks only.
	var got []string
	err = ormtx.Do(context.Background(), db, beginOn(db), func(ctx context.Context, tx *ormtx.Tx) error {
		tx.AfterCommit(func(context.Context) { got = append(got, "commit") })
		tx.AfterRollback(func(context.Context) { got = append(got, "rollback") })
		// Ending the transaction behind Do's back makes its COMMIT fail.
		return tx.ORM().(*sql.Tx).Rollback()
	})
	if !errors.Is(err, sql.ErrTxDone) || !slices.Equal(got, []string{"rollback"}) {
		t.Fatalf("failed commit: err = %v, callbacks %q", err, got)
	}
	if err := ormtx.Do(context.Background(), db, beginOn(db), nil); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("nil fn: err = %v", err)
	}
}

// An integration that ends transactions itself calls Finish; only the first
// call runs callbacks (GORM calls Rollback after a failed Commit).
func TestFinishOnce(t *testing.T) {
	db := openDB(t)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	tr := ormtx.NewTx(tx, nil, slog.New(slog.DiscardHandler))
	var got []string
	tr.AfterCommit(func(context.Context) { got = append(got, "commit") })
	tr.AfterRollback(func(context.Context) { got = append(got, "rollback") })
	tr.Finish(context.Background(), false)
	tr.Finish(context.Background(), true)
	tr.AfterCommit(func(context.Context) { got = append(got, "late") }) // dropped
	tr.Finish(context.Background(), true)
	if !slices.Equal(got, []string{"rollback"}) || !tr.Ended() {
		t.Fatalf("callbacks = %q, ended %v; want one rollback", got, tr.Ended())
	}
}

// A panicking callback and a late registration reach Begun.Logger, and the
// callbacks after the panicking one still run.
func TestLoggerReceivesCallbackProblems(t *testing.T) {
	db := openDB(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	var ran []string
	var late *ormtx.Tx
	err := ormtx.Do(context.Background(), db, func(ctx context.Context) (ormtx.Begun, error) {
		b, err := beginOn(db)(ctx)
		b.Logger = logger
		return b, err
	}, func(ctx context.Context, tx *ormtx.Tx) error {
		late = tx
		tx.AfterCommit(func(context.Context) { panic("callback bug") })
		tx.AfterCommit(func(context.Context) { ran = append(ran, "second") })
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	late.AfterCommit(func(context.Context) { ran = append(ran, "late") })
	if !slices.Equal(ran, []string{"second"}) {
		t.Errorf("callbacks ran %q, want [second]", ran)
	}
	for _, want := range []string{"level=ERROR", "callback bug", "level=WARN"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}
