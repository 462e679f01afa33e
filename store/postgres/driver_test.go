package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/roundtrips"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/internal/writectx"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/txctx"
)

// opened is what the driver tests share: an outbox table and a Writer on
// it (no hook, no NOTIFY: the INSERT alone), a pool of Open's driver of
// one connection whose round trips rec records, a txctx Manager on it and
// a business table.
type opened struct {
	tg  testdb.Target
	db  *sql.DB
	rec *roundtrips.Recorder
	w   *core.Writer
	m   *txctx.Manager
	biz string
}

func newOpened(t *testing.T) *opened {
	o := &opened{tg: testdb.Postgres(t), rec: &roundtrips.Recorder{}}
	cfg, err := pgx.ParseConfig(os.Getenv(testdb.PostgresEnv))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Tracer = o.rec
	o.db = postgres.OpenDB(*cfg)
	t.Cleanup(func() { _ = o.db.Close() })
	o.db.SetMaxOpenConns(1)
	o.biz = testdb.UniqueName("items")
	if _, err := o.db.Exec("CREATE TABLE " + o.biz + " (name TEXT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = o.tg.DB.Exec("DROP TABLE IF EXISTS " + o.biz) })
	if o.w, err = core.NewWriter(core.WriterConfig{Store: o.tg.Store, NoNotify: true}); err != nil {
		t.Fatal(err)
	}
	if o.m, err = txctx.New(o.db, txctx.Config{}); err != nil {
		t.Fatal(err)
	}
	return o
}

func (o *opened) count(t *testing.T, table, where string, args ...any) int {
	t.Helper()
	var n int
	if err := o.tg.DB.QueryRow("SELECT count(*) FROM "+table+" "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func event(t *testing.T, id string) core.Envelope {
	t.Helper()
	env, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: core.EventName("Placed"), AggregateType: core.AggregateName("Invoice"), AggregateID: "i-1", JSON: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestOpenBeginsWithFirstStatement: on a pool of Open, a transaction's
// BEGIN goes with its first statement and the INSERT of events whose ids
// the library generated with its COMMIT: a business statement and a write
// cost two round trips. An id the caller chose is written at Write, and a
// query, a transaction that runs nothing, a rollback behave as with pgx's
// driver, in as few round trips as they can.
func TestOpenBeginsWithFirstStatement(t *testing.T) {
	o := newOpened(t)
	ctx := context.Background()
	bizInsert := "insert into " + o.biz + " (name) values ($1)"
	bizCount := "select count(*) from " + o.biz + " where name = $1"
	runs := 0
	// run runs the business statement (an INSERT, or with query a SELECT),
	// then writes envs, and returns the round trips.
	run := func(query bool, envs ...core.Envelope) ([]string, error) {
		runs++
		o.rec.Start()
		err := o.m.Do(ctx, func(ctx context.Context) error {
			tx, _ := txctx.From(ctx)
			var err error
			if query {
				var n int
				err = tx.QueryRowContext(ctx, bizCount, fmt.Sprint("x", runs)).Scan(&n)
			} else {
				_, err = tx.ExecContext(ctx, bizInsert, fmt.Sprint("x", runs))
			}
			if err != nil || len(envs) == 0 {
				return err
			}
			_, err = o.w.WriteAll(ctx, envs)
			return err
		})
		return o.rec.Stop(), err
	}
	// Prepares the statements: pgx prepares each on its first run, in a
	// round trip the recorder does not see.
	if _, err := run(false, event(t, "00000000000000000000000000")); err != nil {
		t.Fatal(err)
	}
	if _, err := run(true, event(t, "00000000000000000000000001")); err != nil {
		t.Fatal(err)
	}
	outboxInsert := `insert into "` + strings.ToLower(o.tg.Table) + `"`
	check := func(name string, sent []string, err error, want ...string) {
		t.Helper()
		ok := err == nil && len(sent) == len(want)
		for i := 0; ok && i < len(want); i++ {
			w := strings.ReplaceAll(want[i], "OUTBOX", outboxInsert)
			// An outbox INSERT is compared up to its column list and values.
			if head, tail, cut := strings.Cut(w, "…"); cut {
				ok = strings.HasPrefix(sent[i], head) && strings.HasSuffix(sent[i], tail)
			} else {
				ok = sent[i] == w
			}
		}
		if !ok {
			t.Errorf("%s: round trips %q, %v; want %q", name, sent, err, want)
		}
	}
	sent, err := run(false, event(t, ""))
	check("a business row and a generated id", sent, err, "begin + "+bizInsert, "OUTBOX…+ commit")
	sent, err = run(false, event(t, ""), event(t, ""))
	check("two generated ids", sent, err, "begin + "+bizInsert, "OUTBOX…+ commit")
	sent, err = run(false, event(t, "00000000000000000000000009"))
	check("an id the caller chose", sent, err, "begin + "+bizInsert, "OUTBOX…", "commit")
	sent, err = run(true, event(t, ""))
	check("a query first", sent, err, "begin", bizCount, "OUTBOX…+ commit")
	sent, err = run(false)
	check("no write", sent, err, "begin + "+bizInsert, "commit")

	o.rec.Start()
	if err := o.m.Do(ctx, func(ctx context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	o.rec.Want(t) // nothing to begin, nothing to commit

	o.rec.Start()
	env := event(t, "")
	boom := errors.New("boom")
	err = o.m.Do(ctx, func(ctx context.Context) error {
		if _, err := o.w.Write(ctx, env); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Do: %v, want boom", err)
	}
	o.rec.Want(t) // the held write dropped unsent; no BEGIN was sent
	if n := o.count(t, o.tg.Table, "WHERE event_id = $1", env.ID()); n != 0 {
		t.Errorf("a rolled-back write left %d rows", n)
	}

	var writeErr error
	err = o.m.Do(ctx, func(ctx context.Context) error {
		_, writeErr = o.w.Write(ctx, event(t, "00000000000000000000000009"))
		return writeErr
	})
	if !errors.Is(writeErr, core.ErrDuplicateEvent) || !errors.Is(err, core.ErrDuplicateEvent) {
		t.Errorf("a duplicate id the caller chose: Write %v, Do %v; want core.ErrDuplicateEvent from Write", writeErr, err)
	}

	// A Manager on a *sql.Conn of the pool holds writes too.
	c, err := o.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cm, err := txctx.New(c, txctx.Config{})
	if err != nil {
		t.Fatal(err)
	}
	o.rec.Start()
	if err := cm.Do(ctx, func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		if _, err := tx.ExecContext(ctx, bizInsert, "on a conn"); err != nil {
			return err
		}
		_, err := o.w.Write(ctx, event(t, ""))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	sent = o.rec.Stop()
	check("on a *sql.Conn", sent, nil, "begin + "+bizInsert, "OUTBOX…+ commit")
	if n := o.count(t, o.tg.Table, ""); n != 8 {
		t.Errorf("%d events, want 8", n)
	}
}

// TestOpenHeldWriteFails: a held write that fails at COMMIT fails the
// COMMIT with the write's error, rolls the transaction back, and leaves the
// connection ready for the next one.
func TestOpenHeldWriteFails(t *testing.T) {
	o := newOpened(t)
	ctx := context.Background()
	env := event(t, "")
	err := o.m.Do(ctx, func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+o.biz+" (name) VALUES ($1)", "lost"); err != nil {
			return err
		}
		// The row the write will collide with, in the same transaction.
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+o.tg.Table+
			" (event_id, event_type, aggregate_type, aggregate_id, payload, status, created_at, available_at)"+
			" VALUES ($1, 'Placed', 'Invoice', 'i-1', '{}', 1, now(), now())", env.ID()); err != nil {
			return err
		}
		_, err := o.w.Write(ctx, env)
		return err
	})
	var pgErr *pgconn.PgError
	if !errors.Is(err, core.ErrDuplicateEvent) || !errors.As(err, &pgErr) || pgErr.Code != "23505" || !strings.Contains(err.Error(), "commit") {
		t.Fatalf("Do: %v; want the COMMIT to fail with the write's duplicate key", err)
	}
	if n := o.count(t, o.biz, ""); n != 0 {
		t.Errorf("%d business rows after the failed COMMIT, want 0", n)
	}
	// The pool's one connection is usable: no transaction left open on it.
	if err := o.m.Do(ctx, func(ctx context.Context) error {
		_, err := o.w.Write(ctx, event(t, ""))
		return err
	}); err != nil {
		t.Fatalf("the next transaction: %v", err)
	}
	if n := o.count(t, o.tg.Table, ""); n != 1 {
		t.Errorf("%d events, want 1", n)
	}
}

// TestOpenTransactionsAreTransactions: statements that do not pass through
// the connection's Exec (a prepared statement, a query) and the
// transaction's options behave as in a transaction begun with BEGIN at
// BeginTx.
func TestOpenTransactionsAreTransactions(t *testing.T) {
	o := newOpened(t)
	ctx := context.Background()
	st, err := o.db.PrepareContext(ctx, "INSERT INTO "+o.biz+" (name) VALUES ($1)")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, commit := range []bool{false, true} {
		tx, err := o.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, fmt.Sprint("prepared ", commit)); err != nil {
			t.Fatal(err)
		}
		end := tx.Rollback
		if commit {
			end = tx.Commit
		}
		if err := end(); err != nil {
			t.Fatal(err)
		}
		want := 0
		if commit {
			want = 1
		}
		if n := o.count(t, o.biz, "WHERE name = $1", fmt.Sprint("prepared ", commit)); n != want {
			t.Errorf("a prepared statement in a transaction committed %v: %d rows, want %d", commit, n, want)
		}
	}

	tx, err := o.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	var level string
	if err := tx.QueryRowContext(ctx, "SHOW transaction_isolation").Scan(&level); err != nil || level != "serializable" {
		t.Errorf("isolation level %q, %v; want serializable", level, err)
	}
	_, err = tx.ExecContext(ctx, "INSERT INTO "+o.biz+" (name) VALUES ($1)", "read only")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Errorf("an INSERT in a read-only transaction: %v, want read_only_sql_transaction", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := o.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelLinearizable}); err == nil ||
		!strings.Contains(err.Error(), "Linearizable") {
		t.Errorf("BeginTx with LevelLinearizable: %v; want an error naming it", err)
	}
}

// TestOnDriver: writectx.OnDriver, which txctx and ormtx ask whether their
// transactions may hold writes, says yes for Open's pool and its
// connections, and no for pgx's own driver, a nil pool and nil.
func TestOnDriver(t *testing.T) {
	o := newOpened(t)
	ctx := context.Background()
	c, err := o.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	pgxDB, err := sql.Open("pgx", os.Getenv(testdb.PostgresEnv))
	if err != nil {
		t.Fatal(err)
	}
	defer pgxDB.Close()
	for _, tc := range []struct {
		name string
		db   any
		want bool
	}{
		{"Open's pool", o.db, true},
		{"a connection of Open's pool", c, true},
		{"pgx's driver", pgxDB, false},
		{"a nil *sql.DB", (*sql.DB)(nil), false},
		{"nil", nil, false},
	} {
		if got := writectx.OnDriver(tc.db); got != tc.want {
			t.Errorf("OnDriver(%s) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
