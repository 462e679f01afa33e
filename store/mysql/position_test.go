package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
// STREAM INSERT has started in InnoDB, so that information_schema.innodb_trx
// lists it, before the INSERT takes its position. A SLEEP put before
// NEXTVAL in the expression holds the INSERT between the two, as the first
// statement of its transaction; meanwhile InnoDB must report the
// transaction active, and a position another session takes must come
// before the INSERT's. The same check of a bare NEXTVAL finds the
// transaction not started: why the read is there.
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
			listed := innodbActive(t, tg.DB, id)
			var other int64
			if err := tg.DB.QueryRowContext(ctx, "SELECT NEXTVAL("+seq+")").Scan(&other); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil {
				t.Fatal(r.err)
			}
			if listed != c.listed {
				t.Fatalf("transaction active in InnoDB before it took its position: %v, want %v", listed, c.listed)
			}
			if other >= r.pos {
				t.Fatalf("a position taken during the INSERT's sleep is %d, the INSERT's %d: the sleep did not "+
					"come before NEXTVAL", other, r.pos)
			}
		})
	}
}

// innodbActive reports whether InnoDB reports the transaction of
// connection id active (started). It reads SHOW ENGINE INNODB STATUS,
// which InnoDB writes when asked, and not information_schema.innodb_trx,
// which it refreshes only when nobody read it in the last 100 ms: on a
// server other tests' position readers query, that view can stay stale.
func innodbActive(t *testing.T, db *sql.DB, id int64) bool {
	t.Helper()
	var typ, name, status string
	if err := db.QueryRowContext(context.Background(), "SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status); err != nil {
		t.Fatal(err)
	}
	thread := fmt.Sprintf(" thread id %d,", id)
	for _, block := range strings.Split(status, "---TRANSACTION ")[1:] {
		if strings.Contains(block, thread) {
			header, _, _ := strings.Cut(block, "\n")
			return strings.Contains(header, "ACTIVE")
		}
	}
	return false
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
