package postgres_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/postgres"
)

// seqScanRE matches a sequential scan and the partition it reads.
var seqScanRE = regexp.MustCompile(`Seq Scan on (\S+)`)

// TestPartitionedPlans checks, on a partitioned table whose rows are spread
// over ten time partitions and analyzed, that the statements that must walk
// an index still do, partition by partition: the claim merges the pending
// indexes of the partitions in (created_at, event_id) order (a Merge
// Append, no Sort node), and no statement reads a partition that holds rows
// sequentially (an empty partition may be, which costs nothing). Custom and
// generic plans alike. Get and a MarkDone of one id prune every other
// partition, in the generic plan too.
func TestPartitionedPlans(t *testing.T) {
	t.Parallel()
	tg, st, _ := partitioned(t, postgres.Partitions{Interval: time.Minute, Ahead: 9})
	ctx := context.Background()
	parts, err := st.ListPartitions(ctx, tg.DB)
	if err != nil {
		t.Fatal(err)
	}
	tp := timed(parts)[:10]
	const n = 30000
	// created_at over the last two hours, so that the claim from an hour
	// back (claim-from) has half the backlog ahead of it.
	start := time.Now().Add(-2 * time.Hour)
	step := 2 * time.Hour / n
	envs := make([]core.Envelope, 0, 1000)
	for i := range n {
		at := tp[i%len(tp)].Start.Add(time.Duration(i) * time.Millisecond)
		e, err := core.NewEnvelope(core.EnvelopeSpec{ID: idAt(at), Type: core.EventName("Tested"),
			OccurredAt: start.Add(time.Duration(i) * step), JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, e)
		if len(envs) == cap(envs) {
			if err := st.Insert(ctx, tg.DB, envs, core.InsertOptions{}); err != nil {
				t.Fatal(err)
			}
			envs = envs[:0]
		}
	}
	// Half pending, 40% DONE, 10% DEAD, as storetest.FillForPlans, the
	// terminal ones old enough for the purge.
	exec(t, tg.DB, "UPDATE "+tg.Table+" SET status = 1, done_at = created_at - interval '30 days' WHERE abs(hashtext(event_id)) % 10 < 4")
	exec(t, tg.DB, "UPDATE "+tg.Table+" SET status = 3, attempts = 1, done_at = created_at - interval '30 days', last_error = 'x' WHERE abs(hashtext(event_id)) % 10 = 4")
	exec(t, tg.DB, "ANALYZE "+tg.Table)
	holding := map[string]bool{}
	for _, p := range tp {
		holding[p.Name] = true
	}
	conn, err := tg.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stmts := postgres.PlanStatements(st, time.Now())
	var id string
	if err := tg.DB.QueryRow("SELECT event_id FROM " + tg.Table + " LIMIT 1").Scan(&id); err != nil {
		t.Fatal(err)
	}
	stmts = append(stmts, postgres.GetStatement(st, id), postgres.MarkStatement(st, id))
	for i, stmt := range stmts {
		custom := explain(t, conn, "EXPLAIN "+stmt.SQL, stmt.Args...)
		name := fmt.Sprintf("pplan_%d", i)
		if _, err := conn.ExecContext(ctx, "PREPARE "+name+" AS "+stmt.SQL); err != nil {
			t.Fatalf("%s: prepare: %v", stmt.Name, err)
		}
		exec(t, conn, "SET plan_cache_mode = force_generic_plan")
		execute := "EXPLAIN EXECUTE " + name
		if len(stmt.Args) > 0 {
			execute += "(" + literals(stmt.Args) + ")"
		}
		generic := explain(t, conn, execute)
		exec(t, conn, "RESET plan_cache_mode")
		for kind, plan := range map[string]string{"custom": custom, "generic": generic} {
			for _, m := range seqScanRE.FindAllStringSubmatch(plan, -1) {
				if holding[m[1]] {
					t.Errorf("%s (%s plan) reads partition %s sequentially:\n%s", stmt.Name, kind, m[1], plan)
				}
			}
			if strings.Contains(plan, "->  Sort") || strings.HasPrefix(plan, "Sort") {
				t.Errorf("%s (%s plan) sorts:\n%s", stmt.Name, kind, plan)
			}
			if strings.HasPrefix(stmt.Name, "claim") && !strings.Contains(plan, "Merge Append") {
				t.Errorf("%s (%s plan) does not merge the partitions' pending indexes:\n%s", stmt.Name, kind, plan)
			}
			if stmt.Name == "claim-from" && !strings.Contains(plan, "Index Cond: ((created_at >= ") {
				t.Errorf("claim-from (%s plan): From is not the start of the index walks:\n%s", kind, plan)
			}
		}
		if (stmt.Name == "get" || stmt.Name == "mark") && (strings.Count(custom, "Index Scan") != 1 || !strings.Contains(generic, "Subplans Removed")) {
			t.Errorf("%s does not prune to one partition:\ncustom:\n%s\ngeneric:\n%s", stmt.Name, custom, generic)
		}
		t.Logf("%s:\n%s\ngeneric:\n%s", stmt.Name, custom, generic)
	}
}
