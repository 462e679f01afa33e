package sqlite_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/sqlite"
)

// TestQueryPlans checks that the claim, dead queries and purge walk their
// partial indexes instead of scanning the table or sorting (no temp B-tree).
func TestQueryPlans(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	st := tg.Store.(*sqlite.Store)
	wantIndex := map[string]string{"claim": "_pending", "claim-from": "_pending", "dead": "_dead", "count-dead": "_dead", "purge": "_done", "promote": "_seq"}
	for _, stmt := range sqlite.PlanStatements(st, time.Now()) {
		rows, err := tg.DB.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+stmt.SQL, stmt.Args...)
		if err != nil {
			t.Fatalf("%s: %v", stmt.Name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		_ = rows.Close()
		text := strings.Join(plan, "; ")
		if !strings.Contains(text, wantIndex[stmt.Name]) || strings.Contains(text, "TEMP B-TREE") {
			t.Errorf("%s does not walk index %s in order: %s", stmt.Name, wantIndex[stmt.Name], text)
		}
		if stmt.Name == "claim-from" && !strings.Contains(text, "created_at>?") {
			t.Errorf("claim-from does not start its index walk at From: %s", text)
		}
		t.Logf("%s: %s", stmt.Name, text)
	}
}

// TestPositionPlans: the position of a STREAM row (one more than the
// largest) and the reader's reads walk the stream index: a scan of the
// table per INSERT made W1 in position delivery quadratic.
func TestPositionPlans(t *testing.T) {
	t.Parallel()
	tg := testdb.SQLite(t)
	qt := `"` + tg.Store.Table() + `"`
	for name, q := range map[string]string{
		"next position": "SELECT MAX(pos) FROM " + qt + " WHERE pos IS NOT NULL",
		"read after":    "SELECT event_id FROM " + qt + " WHERE pos > 1 AND status = 5 ORDER BY pos LIMIT 10",
		"read range":    "SELECT event_id FROM " + qt + " WHERE status = 5 AND (pos BETWEEN 1 AND 2) ORDER BY pos",
	} {
		rows, err := tg.DB.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+q)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		_ = rows.Close()
		text := strings.Join(plan, "; ")
		if !strings.Contains(text, "_stream") || strings.Contains(text, "TEMP B-TREE") {
			t.Errorf("%s does not walk the stream index: %s", name, text)
		}
	}
}
