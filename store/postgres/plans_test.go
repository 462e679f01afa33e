package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/storetest"
)

// TestPlans checks, on a filled and analyzed table, that the claim, the dead
// query and count, and the purge walk their partial indexes: no sequential
// scan, no Sort node. It checks both the custom plan PostgreSQL makes for one
// execution and the generic plan the pgx driver's prepared statements switch
// to after five executions.
func TestPlans(t *testing.T) {
	t.Parallel()
	tg := testdb.Postgres(t)
	ctx := context.Background()
	n := storetest.FillForPlans(t, tg.Suite(), 30000)
	if _, err := tg.DB.ExecContext(ctx, "ANALYZE "+tg.Table); err != nil {
		t.Fatal(err)
	}
	st := tg.Store.(*postgres.Store)
	want := map[string]string{"claim": "_pending", "claim-from": "_pending", "dead": "_dead", "count-dead": "_dead", "replay-dead": "_dead", "purge": "_done", "promote": "_seq"}
	conn, err := tg.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i, stmt := range postgres.PlanStatements(st, time.Now()) {
		custom := explain(t, conn, "EXPLAIN "+stmt.SQL, stmt.Args...)
		name := fmt.Sprintf("plan_%d", i)
		if _, err := conn.ExecContext(ctx, "PREPARE "+name+" AS "+stmt.SQL); err != nil {
			t.Fatalf("%s: prepare: %v", stmt.Name, err)
		}
		if _, err := conn.ExecContext(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
			t.Fatal(err)
		}
		execute := "EXPLAIN EXECUTE " + name
		if len(stmt.Args) > 0 {
			execute += "(" + literals(stmt.Args) + ")"
		}
		generic := explain(t, conn, execute)
		if _, err := conn.ExecContext(ctx, "RESET plan_cache_mode"); err != nil {
			t.Fatal(err)
		}
		for kind, plan := range map[string]string{"custom": custom, "generic": generic} {
			if !strings.Contains(plan, tg.Table+want[stmt.Name]) || strings.Contains(plan, "Seq Scan") ||
				strings.Contains(plan, "Sort") {
				t.Errorf("%s (%s plan, %d rows) does not walk index %s%s in order:\n%s", stmt.Name, kind, n, tg.Table, want[stmt.Name], plan)
			}
		}
		// The claim from a point in the backlog starts its index walk there:
		// From is an index condition, not a filter on the rows walked.
		if stmt.Name == "claim-from" {
			for kind, plan := range map[string]string{"custom": custom, "generic": generic} {
				if !strings.Contains(plan, "Index Cond: ((created_at >= ") {
					t.Errorf("claim-from (%s plan): From is not the start of the index walk:\n%s", kind, plan)
				}
			}
		}
		t.Logf("%s (%d rows):\n%s\ngeneric:\n%s", stmt.Name, n, custom, generic)
	}
}

func explain(t *testing.T, conn *sql.Conn, q string, args ...any) string {
	t.Helper()
	rows, err := conn.QueryContext(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// literals renders sample arguments as SQL literals for EXECUTE.
func literals(args []any) string {
	out := make([]string, len(args))
	for i, a := range args {
		switch a := a.(type) {
		case time.Time:
			out[i] = "'" + a.Format(time.RFC3339Nano) + "'"
		case string:
			out[i] = "'" + strings.ReplaceAll(a, "'", "''") + "'"
		default:
			out[i] = fmt.Sprint(a)
		}
	}
	return strings.Join(out, ", ")
}
