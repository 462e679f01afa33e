package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/mysql"
)

// TestPositionCheck: on MariaDB the position log's check passes on a table
// CreateSchema made, and names the sequence when it is missing.
func TestPositionCheck(t *testing.T) {
	t.Parallel()
	tg := testdb.MySQL(t)
	ctx := context.Background()
	st := tg.Store.(*mysql.Store)
	lg := position.LogOf(st)
	if lg == nil {
		t.Fatal("no position log")
	}
	if err := lg.CheckSchema(ctx, tg.DB); err != nil {
		t.Fatalf("check of a table CreateSchema made: %v", err)
	}
	seq := st.Table() + "_pos_seq"
	if _, err := tg.DB.ExecContext(ctx, "DROP SEQUENCE `"+seq+"`"); err != nil {
		t.Fatal(err)
	}
	err := lg.CheckSchema(ctx, tg.DB)
	if !errors.Is(err, core.ErrSchema) || !strings.Contains(err.Error(), "sequence "+seq) {
		t.Fatalf("check without the sequence: %v, want a schema error naming it", err)
	}
	// CreateSchema adds it again.
	if err := st.CreateSchema(ctx, tg.DB); err != nil {
		t.Fatal(err)
	}
	if err := lg.CheckSchema(ctx, tg.DB); err != nil {
		t.Fatalf("check after CreateSchema: %v", err)
	}
}

// TestNextPosAfterRead checks what the gap argument of position delivery
// on MariaDB rests on (docs/design/position.md, Gaps): the transaction of a
// STREAM INSERT is listed in information_schema.innodb_trx before the
// INSERT takes its position. A SLEEP put before NEXTVAL in the expression
// holds the INSERT between the two, as the first statement of its
// transaction; meanwhile another session must find the transaction listed,
// and a position it takes must come before the INSERT's. The same check of
// a bare NEXTVAL finds the transaction not listed: why the read is there.
func TestNextPosAfterRead(t *testing.T) {
	t.Parallel()
	tg := testdb.MySQL(t)
	ctx := context.Background()
	st := tg.Store.(*mysql.Store)
	scratch := "`" + st.Table() + "_np`"
	if _, err := tg.DB.ExecContext(ctx, "CREATE TABLE "+scratch+" (id INT PRIMARY KEY, pos BIGINT)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = tg.DB.ExecContext(context.Background(), "DROP TABLE "+scratch) })
	seq := "`" + st.Table() + "_pos_seq`"
	for i, c := range []struct {
		name, expr string
		listed     bool
	}{
		{"NextPos", mysql.NextPosSQL(st), true},
		{"bare NEXTVAL", "NEXTVAL(" + seq + ")", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			sleepy := strings.Replace(c.expr, "NEXTVAL(", "0 * SLEEP(2) + NEXTVAL(", 1)
			if sleepy == c.expr {
				t.Fatalf("no NEXTVAL in %s", c.expr)
			}
			conn, err := tg.DB.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			var id int64
			if err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				t.Fatal(err)
			}
			type result struct {
				pos int64
				err error
			}
			done := make(chan result, 1)
			go func() {
				var r result
				tx, err := conn.BeginTx(ctx, nil)
				if err != nil {
					done <- result{err: err}
					return
				}
				defer tx.Rollback()
				if _, r.err = tx.ExecContext(ctx, "INSERT INTO "+scratch+" VALUES (?, "+sleepy+")", i); r.err == nil {
					r.err = tx.QueryRowContext(ctx, "SELECT pos FROM "+scratch+" WHERE id = ?", i).Scan(&r.pos)
				}
				if r.err == nil {
					r.err = tx.Commit()
				}
				done <- r
			}()
			waitUntil(t, func() bool {
				var n int
				err := tg.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.processlist "+
					"WHERE id = ? AND state = 'User sleep'", id).Scan(&n)
				return err == nil && n == 1
			})
			listed := innodbTrxLists(t, tg.DB, st.PosTable(), id)
			var other int64
			if err := tg.DB.QueryRowContext(ctx, "SELECT NEXTVAL("+seq+")").Scan(&other); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if listed != c.listed {
				t.Fatalf("transaction listed in innodb_trx before it took its position: %v, want %v", listed, c.listed)
			}
			if other >= r.pos {
				t.Fatalf("a position taken during the INSERT's sleep is %d, the INSERT's %d: the sleep did not "+
					"come before NEXTVAL", other, r.pos)
			}
		})
	}
}

// innodbTrxLists reports whether information_schema.innodb_trx lists the
// transaction of connection id. InnoDB refreshes that view only when nobody
// read it in the last 100 ms: it asks from a transaction of its own until
// the view lists that one too, which makes the answer a fresh one.
func innodbTrxLists(t *testing.T, db *sql.DB, posTable string, id int64) bool {
	t.Helper()
	ctx := context.Background()
	var listed bool
	waitUntil(t, func() bool {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		var n, own, other int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+posTable+"`").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRowContext(ctx, "SELECT COALESCE(SUM(trx_mysql_thread_id = CONNECTION_ID()), 0), "+
			"COALESCE(SUM(trx_mysql_thread_id = ?), 0) FROM information_schema.innodb_trx", id).Scan(&own, &other); err != nil {
			t.Fatal(err)
		}
		listed = other > 0
		return own > 0
	})
	return listed
}

// waitUntil polls cond every 20 ms for up to 5 s.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatal("condition not met after 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
