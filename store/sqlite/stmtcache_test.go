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

func TestStatementCacheQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := openConn(t)
	if _, err := conn.ExecContext(ctx, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	for k := 1; k <= 3; k++ {
		if _, err := conn.ExecContext(ctx, "INSERT INTO t (k, v) VALUES (?, ?)", k, fmt.Sprint("v", k)); err != nil {
			t.Fatal(err)
		}
	}
	const sel = "SELECT k, v FROM t WHERE k >= ? ORDER BY k"
	read := func(from int) []string {
		t.Helper()
		rows, err := conn.QueryContext(ctx, sel, from)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var k int
			var v string
			if err := rows.Scan(&k, &v); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprint(k, v))
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := fmt.Sprint(read(2)); got != "[2v2 3v3]" {
		t.Fatalf("first query: %s", got)
	}
	var first *cachedStmt
	cacheOf(t, conn, func(c *cachingConn) { first = c.stmts[sel].Value.(*cachedStmt) })
	if got := fmt.Sprint(read(1)); got != "[1v1 2v2 3v3]" {
		t.Fatalf("second query, other arguments: %s", got)
	}
	cacheOf(t, conn, func(c *cachingConn) {
		if c.stmts[sel].Value.(*cachedStmt) != first || first.busy {
			t.Errorf("the query was not reused from the cache, or stayed busy after its rows closed (busy %v)", first.busy)
		}
	})

	// The same query inside the loop over its own rows runs uncached; both
	// read everything.
	rows, err := conn.QueryContext(ctx, sel, 1)
	if err != nil {
		t.Fatal(err)
	}
	var outer []string
	for rows.Next() {
		var k int
		var v string
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		outer = append(outer, fmt.Sprint(k, v, read(k)))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	want := "[1v1[1v1 2v2 3v3] 2v2[2v2 3v3] 3v3[3v3]]"
	if got := fmt.Sprint(outer); got != want {
		t.Fatalf("nested queries of one text:\n got %s\nwant %s", got, want)
	}

	// A busy statement pushed out of the cache is closed with its rows, and
	// its text prepared again afterwards.
	rows, err = conn.QueryContext(ctx, sel, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range stmtCacheSize + 1 {
		if _, err := conn.ExecContext(ctx, fmt.Sprintf("UPDATE t SET v = v WHERE k = %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	cacheOf(t, conn, func(c *cachingConn) {
		if _, ok := c.stmts[sel]; ok || !first.evicted || !first.busy {
			t.Errorf("busy query: cached %v, evicted %v, busy %v; want evicted while busy", ok, first.evicted, first.busy)
		}
	})
	if !rows.Next() {
		t.Fatalf("the evicted statement's open rows lost their row: %v", rows.Err())
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(read(3)); got != "[3v3]" {
		t.Fatalf("query after its statement was evicted: %s", got)
	}
}
