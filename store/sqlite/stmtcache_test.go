package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
)

// cacheOf runs fn with the statement cache of conn's driver connection.
func cacheOf(t *testing.T, conn *sql.Conn, fn func(c *cachingConn)) {
	t.Helper()
	err := conn.Raw(func(dc any) error {
		c, ok := dc.(*cachingConn)
		if !ok {
			return fmt.Errorf("driver connection is %T, want *cachingConn", dc)
		}
		fn(c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func openDB(t *testing.T) *sql.DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "cache.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// openConn returns the pool's one connection, held for the test.
func openConn(t *testing.T) *sql.Conn {
	t.Helper()
	conn, err := openDB(t).Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func TestStatementCacheReusesAndEvicts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := openConn(t)
	mustExec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	mustExec("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")
	const insert = "INSERT INTO t (k, v) VALUES (?, ?)"
	mustExec(insert, 1, "a")
	var first *cachedStmt
	cacheOf(t, conn, func(c *cachingConn) { first = c.stmts[insert].Value.(*cachedStmt) })
	for k := 2; k <= 10; k++ {
		mustExec(insert, k, "b")
	}
	cacheOf(t, conn, func(c *cachingConn) {
		if got := c.stmts[insert].Value.(*cachedStmt); got != first {
			t.Error("the insert was prepared again instead of reusing its cached statement")
		}
	})

	// A failed execution leaves the statement usable.
	if _, err := conn.ExecContext(ctx, insert, 1, "dup"); err == nil {
		t.Fatal("duplicate key accepted")
	}
	mustExec(insert, 11, "c")

	// More distinct statements than the cache holds: the oldest are closed
	// and prepared again when they come back.
	for i := range stmtCacheSize + 5 {
		mustExec(fmt.Sprintf("UPDATE t SET v = ? WHERE k = %d", i), "x")
	}
	cacheOf(t, conn, func(c *cachingConn) {
		if c.lru.Len() != stmtCacheSize || len(c.stmts) != stmtCacheSize {
			t.Errorf("cache holds %d statements (%d keys), want %d", c.lru.Len(), len(c.stmts), stmtCacheSize)
		}
		if _, ok := c.stmts[insert]; ok {
			t.Error("the least recently used statement was not evicted")
		}
	})
	mustExec(insert, 12, "d")

	// k 1-11 were all updated to x by then; k 12 came after.
	var total, notX int
	if err := conn.QueryRowContext(ctx, "SELECT COUNT(*), COUNT(*) FILTER (WHERE v <> 'x') FROM t").Scan(&total, &notX); err != nil || total != 12 || notX != 1 {
		t.Fatalf("rows = %d, not updated = %d (%v), want 12 and 1", total, notX, err)
	}
}

func TestStatementCacheAcrossSchemaChangesScriptsAndCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t)
	// A script of several statements still runs whole.
	if _, err := db.ExecContext(ctx, "CREATE TABLE a (x INTEGER); CREATE TABLE b (y INTEGER)"); err != nil {
		t.Fatal(err)
	}
	const insert = "INSERT INTO a (x) VALUES (?)"
	if _, err := db.ExecContext(ctx, insert, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO b (y) VALUES (1)"); err != nil {
		t.Fatalf("second table of the script missing: %v", err)
	}
	// The cached insert follows a table rebuilt under it.
	if _, err := db.ExecContext(ctx, "DROP TABLE a; CREATE TABLE a (x INTEGER CHECK (x > 0))"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, insert, -1); err == nil {
		t.Error("the cached insert ignored the new table's CHECK constraint")
	}
	if _, err := db.ExecContext(ctx, insert, 2); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := db.ExecContext(cctx, insert, 3); !errors.Is(err, context.Canceled) {
		t.Errorf("exec with a cancelled context: err = %v, want context.Canceled", err)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM a").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows in a = %d (%v), want 1", n, err)
	}
}
