package mysql_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/storetest"
)

// TestPlans checks, on a filled and analyzed table, that each statement that
// searches for rows reads its index ("key") and never sorts ("Using
// filesort"): the claim of both strategies, the dead query, count and batch
// replay, and the purge.
func TestPlans(t *testing.T) {
	for _, claim := range []mysql.ClaimStrategy{mysql.ClaimSkipLocked, mysql.ClaimUpdateLimit} {
		t.Run(claim.String(), func(t *testing.T) {
			t.Parallel()
			tg := testdb.MySQLWith(mysql.Config{Claim: claim})(t)
			ctx := context.Background()
			n := storetest.FillForPlans(t, tg.Suite(), 30000)
			if _, err := tg.DB.ExecContext(ctx, "ANALYZE TABLE "+tg.Table); err != nil {
				t.Fatal(err)
			}
			st := tg.Store.(*mysql.Store)
			want := map[string]string{"claim": "_lane", "claim-from": "_lane", "claim-read-back": "_lease", "dead": "_lane",
				"count-dead": "_lane", "replay-dead": "_lane", "purge": "_lane",
				"promote": "_seq", "promote-read": "_lease"}
			for _, stmt := range mysql.PlanStatements(st, time.Now()) {
				plan := explain(t, tg.DB, stmt.SQL, stmt.Args...)
				if stmt.Name == "promote" {
					// A join of the events (by key and seq) with their key rows
					// (by primary key), each table through its index.
					checkPromote(t, tg.Table, plan)
					continue
				}
				if len(plan) != 1 {
					t.Fatalf("%s: want one plan row, got %v", stmt.Name, plan)
				}
				p := plan[0]
				// The read-back of promoted rows finds them by lease, as the
				// claim's does, or by (key, seq): either is a few rows.
				key := p["key"]
				if stmt.Name == "promote-read" && strings.HasPrefix(key, tg.Table+"_seq") {
					key = tg.Table + "_lease"
				}
				if !strings.HasPrefix(key, tg.Table+want[stmt.Name]) || strings.Contains(p["Extra"], "filesort") ||
					p["type"] == "ALL" || p["type"] == "index" {
					t.Errorf("%s (%d rows) does not walk index %s%s in order: %v", stmt.Name, n, tg.Table, want[stmt.Name], p)
				}
				if stmt.Name == "claim-from" && p["type"] != "range" {
					t.Errorf("claim-from (%d rows) is not a range of index %s%s: %v", n, tg.Table, want[stmt.Name], p)
				}
				t.Logf("%s (%d rows): type=%s key=%s rows=%s Extra=%s", stmt.Name, n, p["type"], p["key"], p["rows"], p["Extra"])
			}
		})
	}
}

// checkPromote checks the plan of the promotion: the events of table found
// through its seq index, their key rows through the key table's primary
// key, neither scanned nor sorted.
func checkPromote(t *testing.T, table string, plan []map[string]string) {
	t.Helper()
	want := map[string]string{"e": table + "_seq", "k": "PRIMARY"}
	if len(plan) != len(want) {
		t.Fatalf("promote: want %d plan rows, got %v", len(want), plan)
	}
	for _, p := range plan {
		key, ok := want[p["table"]]
		if !ok || !strings.HasPrefix(p["key"], key) || strings.Contains(p["Extra"], "filesort") ||
			p["type"] == "ALL" || p["type"] == "index" {
			t.Errorf("promote does not read %s through index %s: %v", p["table"], key, p)
		}
		t.Logf("promote: table=%s type=%s key=%s rows=%s Extra=%s", p["table"], p["type"], p["key"], p["rows"], p["Extra"])
	}
}

// explain returns EXPLAIN's rows as column name to value maps (MySQL and
// MariaDB differ in the columns they show).
func explain(t *testing.T, db *sql.DB, q string, args ...any) []map[string]string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "EXPLAIN "+q, args...)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", q, err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for i, c := range cols {
			m[c] = vals[i].String
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
