package storetest

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

// PlanRowsEnv overrides the number of rows FillForPlans inserts, for the
// 1,000,000-row check: OUTBOX_PLAN_ROWS=1000000 go test -run Plans ./store/...
const PlanRowsEnv = "OUTBOX_PLAN_ROWS"

// FillForPlans fills tg's table with n rows (or $OUTBOX_PLAN_ROWS), so that
// the planner's choices are the ones a real table gets: half of them pending
// (ids "p-..."), 40% DONE ("d-...") and 10% DEAD ("x-..."), interleaved in
// created_at order. It returns the number of rows. Callers update the
// planner's statistics (ANALYZE) afterwards.
func FillForPlans(t testing.TB, tg Target, n int) int {
	t.Helper()
	if v := os.Getenv(PlanRowsEnv); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 10 {
			t.Fatalf("%s=%q: want a number of rows >= 10", PlanRowsEnv, v)
		}
	}
	const chunk = 10000
	c := ctx(t)
	start := time.Now().UTC().Add(-30 * 24 * time.Hour)
	envs := make([]core.Envelope, 0, chunk)
	for i := range n {
		prefix := "p"
		switch i % 10 {
		case 0, 1, 2, 3:
			prefix = "d"
		case 4:
			prefix = "x"
		}
		envs = append(envs, env(t, fmt.Sprintf("%s-%08d", prefix, i), start.Add(time.Duration(i)*time.Millisecond)))
		if len(envs) == chunk || i == n-1 {
			if err := tg.Store.Insert(c, tg.DB, envs, core.InsertOptions{}); err != nil {
				t.Fatalf("fill: %v", err)
			}
			envs = envs[:0]
		}
	}
	for _, q := range []string{
		"UPDATE " + tg.Table + " SET status = 1, done_at = created_at WHERE event_id LIKE 'd-%'",
		"UPDATE " + tg.Table + " SET status = 3, attempts = 1, done_at = created_at, last_error = 'x' WHERE event_id LIKE 'x-%'",
	} {
		if _, err := tg.DB.ExecContext(c, q); err != nil {
			t.Fatalf("fill: %v", err)
		}
	}
	return n
}
