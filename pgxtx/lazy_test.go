package pgxtx_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/internal/testsupport/roundtrips"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/pgxtx"
)

// tracedPool is a pool of one connection whose round trips rec records.
func tracedPool(t *testing.T, rec *roundtrips.Recorder) *pgxpool.Pool {
	return testdb.PgxPoolWith(t, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.Tracer = rec
	})
}

// TestBeginRidesWithFirstStatement: BEGIN goes in one round trip with the
// transaction's first statement, the others and COMMIT one each, and a
// transaction that runs nothing sends nothing.
func TestBeginRidesWithFirstStatement(t *testing.T) {
	var rec roundtrips.Recorder
	pool := tracedPool(t, &rec)
	table := items(t, pool)
	m := newManager(t, pool, pgxtx.Config{})
	ctx := context.Background()
	insert := "INSERT INTO " + table + " (name) VALUES ($1)"
	run := func(names ...string) error {
		return m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			for _, n := range names {
				if _, err := tx.Exec(ctx, insert, n); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := run("warm"); err != nil { // prepares the statements on the connection
		t.Fatal(err)
	}

	rec.Start()
	if err := run("a", "b"); err != nil {
		t.Fatal(err)
	}
	lower := strings.ToLower(insert)
	rec.Want(t, "begin + "+lower, lower, "commit")

	rec.Start()
	committed := false
	err := m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		t2, _ := pgxtx.From(ctx)
		t2.AfterCommit(func(context.Context) { committed = true })
		return nil
	})
	if err != nil || !committed {
		t.Fatalf("empty transaction: %v, after-commit ran %v; want nil, true", err, committed)
	}
	rec.Want(t)

	if n := count(t, pool, table); n != 3 {
		t.Fatalf("%d rows, want 3", n)
	}
}

// TestFirstStatementIsInTheTransaction starts a transaction with each kind of
// first statement, then rolls it back: nothing the statement wrote is left,
// and the connection goes back to the pool outside a transaction.
func TestFirstStatementIsInTheTransaction(t *testing.T) {
	pool := testdb.PgxPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	table := items(t, pool)
	m := newManager(t, pool, pgxtx.Config{})
	insert := "INSERT INTO " + table + " (name) VALUES ($1)"
	firsts := map[string]func(ctx context.Context, tx pgx.Tx) error{
		"Exec": func(ctx context.Context, tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, insert, "x")
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("tag %q", tag)
			}
			return err
		},
		"Exec without arguments": func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ('x'); INSERT INTO "+table+" (name) VALUES ('y')")
			return err
		},
		"Exec with a QueryExecMode": func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, insert, pgx.QueryExecModeExec, "x")
			return err
		},
		"Exec with named arguments": func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES (@name)", pgx.NamedArgs{"name": "x"})
			return err
		},
		"Query": func(ctx context.Context, tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "INSERT INTO "+table+" (name) VALUES ($1), ($2) RETURNING name", "x", "y")
			if err != nil {
				return err
			}
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err == nil && fmt.Sprint(names) != "[x y]" {
				err = fmt.Errorf("returned %v", names)
			}
			return err
		},
		"Query closed early": func(ctx context.Context, tx pgx.Tx) error {
			rows, err := tx.Query(ctx, "INSERT INTO "+table+" (name) VALUES ($1), ($2) RETURNING name", "x", "y")
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		},
		"QueryRow": func(ctx context.Context, tx pgx.Tx) error {
			var name string
			err := tx.QueryRow(ctx, "INSERT INTO "+table+" (name) VALUES ($1) RETURNING name", "x").Scan(&name)
			if err == nil && name != "x" {
				err = fmt.Errorf("returned %q", name)
			}
			return err
		},
		"SendBatch": func(ctx context.Context, tx pgx.Tx) error {
			var b pgx.Batch
			b.Queue(insert, "x")
			b.Queue(insert, "y")
			br := tx.SendBatch(ctx, &b)
			if br.Tx() != nil {
				return errors.New("the batch reports a transaction of its own")
			}
			if _, err := br.Exec(); err != nil {
				return err
			}
			return br.Close()
		},
		"CopyFrom": func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.CopyFrom(ctx, pgx.Identifier{table}, []string{"name"}, pgx.CopyFromRows([][]any{{"x"}, {"y"}}))
			return err
		},
		"Begin": func(ctx context.Context, tx pgx.Tx) error {
			sp, err := tx.Begin(ctx)
			if err != nil {
				return err
			}
			if _, err := sp.Exec(ctx, insert, "x"); err != nil {
				return err
			}
			return sp.Commit(ctx)
		},
		"Conn": func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Conn().Exec(ctx, insert, "x")
			return err
		},
		"LargeObjects": func(ctx context.Context, tx pgx.Tx) error {
			los := tx.LargeObjects()
			if _, err := los.Create(ctx, 0); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, insert, "x")
			return err
		},
	}
	errRollBack := errors.New("roll back")
	for name, first := range firsts {
		t.Run(name, func(t *testing.T) {
			err := m.Do(context.Background(), func(ctx context.Context, tx pgx.Tx) error {
				if err := first(ctx, tx); err != nil {
					return err
				}
				var inTx bool
				if err := tx.QueryRow(ctx, "SELECT count(*) > 0 FROM "+table).Scan(&inTx); err != nil {
					return err
				}
				if !inTx {
					t.Error("the transaction does not see what its first statement wrote")
				}
				return errRollBack
			})
			if !errors.Is(err, errRollBack) {
				t.Fatalf("Do: %v, want the function's error", err)
			}
			if n := count(t, pool, table); n != 0 {
				t.Fatalf("%d rows after the rollback, want 0", n)
			}
			var status string
			if err := pool.AcquireFunc(context.Background(), func(c *pgxpool.Conn) error {
				status = string(c.Conn().PgConn().TxStatus())
				return nil
			}); err != nil || status != "I" {
				t.Fatalf("the pool's connection: status %q, %v; want I (idle, outside a transaction)", status, err)
			}
		})
	}
}

// TestFailedFirstStatement: a first statement that fails (a duplicate key)
// aborts the transaction begun with it, as it would after a BEGIN of its
// own; a BEGIN that fails leaves nothing to run in.
func TestFailedFirstStatement(t *testing.T) {
	pool := testdb.PgxPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	table := items(t, pool)
	ctx := context.Background()
	insert := "INSERT INTO " + table + " (name) VALUES ($1)"
	if _, err := pool.Exec(ctx, insert, "taken"); err != nil {
		t.Fatal(err)
	}

	m := newManager(t, pool, pgxtx.Config{})
	var firstErr, nextErr error
	err := m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, firstErr = tx.Exec(ctx, insert, "taken")
		_, nextErr = tx.Exec(ctx, insert, "other")
		return nil // commits what is left: nothing, the transaction is aborted
	})
	var pgErr *pgconn.PgError
	if !errors.As(firstErr, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("first statement: %v, want a unique violation", firstErr)
	}
	if !errors.As(nextErr, &pgErr) || pgErr.Code != "25P02" {
		t.Fatalf("next statement: %v, want 25P02 (the transaction is aborted)", nextErr)
	}
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("Do: %v, want the COMMIT that rolled back", err)
	}

	bad := newManager(t, pool, pgxtx.Config{TxOptions: pgx.TxOptions{BeginQuery: "BEGIN ISOLATION LEVEL NONSENSE"}})
	err = bad.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, firstErr = tx.Exec(ctx, insert, "x")
		_, nextErr = tx.Exec(ctx, insert, "y")
		return nil
	})
	if !errors.As(firstErr, &pgErr) || pgErr.Code != "42601" {
		t.Fatalf("statement behind a bad BEGIN: %v, want BEGIN's syntax error", firstErr)
	}
	if !errors.Is(nextErr, pgx.ErrTxClosed) || !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("next statement %v, Do %v: want pgx.ErrTxClosed (nothing runs outside the transaction)", nextErr, err)
	}
	if n := count(t, pool, table); n != 1 {
		t.Fatalf("%d rows, want only the one written first", n)
	}
}

// TestBeginOnConn: a Manager on a *pgx.Conn begins with the first
// statement too, and leaves the connection ready for the next transaction.
func TestBeginOnConn(t *testing.T) {
	pool := testdb.PgxPool(t)
	table := items(t, pool)
	ctx := context.Background()
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	m := newManager(t, c.Conn(), pgxtx.Config{})
	for i, fail := range []bool{true, false} {
		err := m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (name) VALUES ($1)", fmt.Sprint(i)); err != nil {
				return err
			}
			if fail {
				return errors.New("roll back")
			}
			return nil
		})
		if (err != nil) != fail {
			t.Fatalf("transaction %d: %v", i, err)
		}
		if s := c.Conn().PgConn().TxStatus(); s != 'I' {
			t.Fatalf("after transaction %d the connection's status is %q, want I", i, s)
		}
	}
	if n := count(t, pool, table); n != 1 {
		t.Fatalf("%d rows, want 1", n)
	}
}

// TestFirstStatementOnLostConnection: when the server has closed the
// pool's connection (a restart, an administrator), the statement that
// carries BEGIN fails, Do returns its error with nothing written, the pool
// drops the connection, and the next Do runs on a new one.
func TestFirstStatementOnLostConnection(t *testing.T) {
	pool := testdb.PgxPoolWith(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	table := items(t, pool)
	ctx := context.Background()
	insert := "INSERT INTO " + table + " (name) VALUES ($1)"
	var pid uint32
	if err := pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		pid = c.Conn().PgConn().PID()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	admin := testdb.PgxPool(t)
	// Waits (up to 5 s) until the backend has exited.
	var gone bool
	if err := admin.QueryRow(ctx, "SELECT pg_terminate_backend($1, 5000)", int64(pid)).Scan(&gone); err != nil || !gone {
		t.Fatalf("terminate the pool's backend: %v, %v", gone, err)
	}

	m := newManager(t, pool, pgxtx.Config{})
	err := m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insert, "lost")
		return err
	})
	if err == nil {
		t.Fatal("Do on a terminated connection succeeded")
	}
	if err := m.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insert, "next")
		return err
	}); err != nil {
		t.Fatalf("the next Do: %v", err)
	}
	var names []string
	rows, _ := pool.Query(ctx, "SELECT name FROM "+table)
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || fmt.Sprint(names) != "[next]" {
		t.Fatalf("rows %v, %v; want only the next Do's", names, err)
	}
}
