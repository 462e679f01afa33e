package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
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

// TestKeyPlans checks the key statements of an ordered DONE batch of the
// largest size, on 1,000 keys of 20 events each and on 200 keys (W5's),
// before and after ANALYZE: the key UPDATE walks ranges of the key table's
// primary key, and the locking read of its rows those ranges or its
// aggregate type's, and the promotion finds
// the events by (key, seq), then their key rows, as does the locking read's
// join of each key's next event. With every key of a big
// batch in one statement the server scanned the key table and the events
// instead, holding the keys' locks for the scan; without its index hint,
// MariaDB scanned the whole primary key of the 200-key table for 64 keys,
// from its first row, waiting for rows outside the batch's keys.
func TestKeyPlans(t *testing.T) {
	for _, keys := range []int{1000, 200} {
		t.Run(fmt.Sprint(keys), func(t *testing.T) {
			t.Parallel()
			keyPlans(t, keys)
		})
	}
}

func keyPlans(t *testing.T, keys int) {
	tg := testdb.MySQL(t)
	ctx := context.Background()
	ordered, ok := tg.Ordered.(*mysql.Store)
	if !ok {
		t.Fatalf("Target.Ordered is %T", tg.Ordered)
	}
	const events = 20
	now := time.Now().UTC().Truncate(time.Microsecond)
	ids := make([]string, keys)
	var keyRows []string
	var keyArgs []any
	for k := range keys {
		ids[k] = fmt.Sprintf("k-%06d", k)
		keyRows = append(keyRows, "(?, ?, ?, ?, ?)")
		keyArgs = append(keyArgs, "Order", ids[k], events, 15, now)
	}
	// Per key: seq 1-15 DONE, 16 its head, 17-20 waiting.
	for seq := 1; seq <= events; seq++ {
		status := 4
		switch {
		case seq <= 15:
			status = 1
		case seq == 16:
			status = 0
		}
		var rows []string
		var args []any
		for _, id := range ids {
			rows = append(rows, "(?, 'Placed', 'Order', ?, '{}', ?, ?, ?, ?)")
			args = append(args, fmt.Sprintf("%s-%02d", id, seq), id, status, now, now, seq)
		}
		if _, err := tg.DB.ExecContext(ctx, "INSERT INTO "+tg.Table+" (event_id, event_type, aggregate_type, aggregate_id, payload, "+
			"status, available_at, created_at, seq) VALUES "+strings.Join(rows, ", "), args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tg.DB.ExecContext(ctx, "INSERT INTO "+ordered.KeyTable()+" (aggregate_type, aggregate_id, last_seq, done_seq, updated_at) VALUES "+
		strings.Join(keyRows, ", "), keyArgs...); err != nil {
		t.Fatal(err)
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := tg.DB.ExecContext(ctx, "ANALYZE TABLE "+tg.Table+", "+ordered.KeyTable()); err != nil {
				t.Fatal(err)
			}
		}
		stmts := mysql.KeyPlanStatements(ordered, "Order", ids, now)
		if len(stmts) != 3 {
			t.Fatalf("KeyPlanStatements: %d statements, want 3", len(stmts))
		}
		for _, stmt := range stmts {
			plan := explain(t, tg.DB, stmt.SQL, stmt.Args...)
			if stmt.Name == "promote" {
				checkPromote(t, tg.Table, plan)
				if len(plan) > 0 && plan[0]["table"] != "e" {
					t.Errorf("promote (analyzed %v) starts from %s, want the events (e): %v", analyzed, plan[0]["table"], plan)
				}
				continue
			}
			if stmt.Name == "key-lock" {
				checkKeyLockNext(t, tg.Table, plan)
				plan = plan[:min(len(plan), 1)]
			}
			if len(plan) != 1 {
				t.Fatalf("%s: want one plan row, got %v", stmt.Name, plan)
			}
			p := plan[0]
			// The locking read passes held rows (SKIP LOCKED) and so never
			// waits: it may read the aggregate type's keys (ref), releasing
			// the rows outside its list (READ COMMITTED).
			ok := p["type"] == "range" || stmt.Name == "key-lock" && p["type"] == "ref"
			if p["key"] != "PRIMARY" || !ok || strings.Contains(p["Extra"], "filesort") {
				t.Errorf("%s (%d keys, analyzed %v) is not a range of the key table's primary key: %v", stmt.Name, keys, analyzed, p)
			}
			t.Logf("%s (%d keys, analyzed %v): type=%s key=%s rows=%s Extra=%s", stmt.Name, keys, analyzed, p["type"], p["key"], p["rows"], p["Extra"])
		}
	}
}

// checkKeyLockNext checks the plan of the first pass's locking read of the
// key rows: the key rows first (their plan is checked with the others'),
// then, for each, the event after its run, found through the seq index by
// the whole (key, seq), not by the key alone (which would read and lock
// every event of the key).
func checkKeyLockNext(t *testing.T, table string, plan []map[string]string) {
	t.Helper()
	if len(plan) != 2 || plan[0]["table"] != "k" || plan[1]["table"] != "e" {
		t.Fatalf("key-lock: want the key rows (k), then the events (e), got %v", plan)
	}
	e := plan[1]
	if e["type"] != "ref" || e["key"] != table+"_seq" || strings.Count(e["ref"], ",") != 2 {
		t.Errorf("key-lock: the events are not found by (key, seq) in %s_seq: %v", table, e)
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
