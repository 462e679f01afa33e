package main

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/procstat"
	"github.com/outboxkit/outbox/purge"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/store/postgres"
)

// partitionedTarget returns tg (PostgreSQL) with stores on partitioned
// tables: -part-interval partitions, -part-ahead made ahead, so that a
// table has -part-ahead + 1 time partitions and the three catch-alls.
func partitionedTarget(c *config, tg *target) *target {
	p := *tg
	p.partitioned = true
	parts := postgres.Partitions{Interval: c.partInterval, Ahead: c.partAhead}
	p.newStore = func(table string, o core.Ordering) (store.SchemaManager, error) {
		return postgres.New(postgres.Config{Table: table, Ordered: o, Partitions: &parts})
	}
	return &p
}

// label names tg's tables in the reports: "postgres" or
// "postgres-partitioned".
func (tg *target) label() string {
	if tg.partitioned {
		return tg.name + "-partitioned"
	}
	return tg.name
}

// runPartition compares the plain and the partitioned table on PostgreSQL
// in one run: W1 (the insert path, with its raw baselines) and W2 (the
// drain, with its raw claim+UPDATE baselines) on each, then the purge of
// -part-purge-events old DONE rows: row by row on the plain table, by
// dropping the partition on the partitioned one.
func runPartition(ctx context.Context, c *config, tg *target) ([]result, error) {
	if tg.name != "postgres" {
		fmt.Printf("\n[%s] partitions: PostgreSQL only; skipped\n", tg.name)
		return nil, nil
	}
	ptg := partitionedTarget(c, tg)
	fmt.Printf("\n[postgres] partitioned tables: %s partitions, %d ahead (%d time partitions per table)\n", c.partInterval, c.partAhead, c.partAhead+1)
	var rs []result
	for _, w := range []func(context.Context, *config, *target, bool, bool) ([]result, error){runW1, runW2} {
		for _, t := range []*target{tg, ptg} {
			fmt.Printf("\n    --- %s table ---", t.label())
			r, err := w(ctx, c, t, true, false)
			if err != nil {
				return nil, fmt.Errorf("%s table: %w", t.label(), err)
			}
			for i := range r {
				r[i].DB = t.label()
			}
			rs = append(rs, r...)
		}
	}
	var purges []result
	for _, t := range []*target{tg, ptg, tg, ptg} {
		r, err := purgeRun(ctx, c, t)
		if err != nil {
			return nil, fmt.Errorf("%s purge: %w", t.label(), err)
		}
		purges = append(purges, r)
	}
	fmt.Printf("\n[postgres] purge of %d DONE rows older than the retention (load %s)\n", c.partPurgeEvents, procstat.LoadAvg())
	fmt.Printf("    %-34s %10s %12s %14s\n", "table", "seconds", "rows/s", "go cpu us/row")
	for _, r := range purges {
		fmt.Printf("    %-34s %10.3f %12.0f %14.2f\n", r.Run, r.Seconds, r.PerSec, r.cpuPerEvent())
	}
	plain := (purges[0].Seconds + purges[2].Seconds) / 2
	for i := range purges {
		purges[i].Baseline = "mean of the plain table's purge runs (ratio = plain seconds / these seconds)"
		purges[i].Ratio = plain / purges[i].Seconds
	}
	fmt.Printf("    partitioned purge is %.0fx faster than the plain table's (mean of two runs each)\n",
		plain/((purges[1].Seconds+purges[3].Seconds)/2))
	return append(rs, purges...), nil
}

// purgeRun fills a fresh table of tg with -part-purge-events events created
// now, all DONE ten days ago, and times one purge run (7 days' retention,
// its clock set past the end of the partition holding them) until no row
// is left. The run's rows/s count the rows removed, dropped or deleted.
func purgeRun(ctx context.Context, c *config, tg *target) (result, error) {
	db, err := tg.open(4)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	t, err := newTable(ctx, tg, db, "purge")
	if err != nil {
		return result{}, err
	}
	defer t.drop(ctx)
	n := c.partPurgeEvents
	const chunk = 1000
	envs := make([]core.Envelope, 0, chunk)
	for i := range n {
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, AggregateType: orderAgg,
			AggregateID: fmt.Sprintf("o-%09d", i), JSON: payload(i)})
		if err != nil {
			return result{}, err
		}
		envs = append(envs, env)
		if len(envs) == chunk || i == n-1 {
			if err := t.st.Insert(ctx, db, envs, core.InsertOptions{}); err != nil {
				return result{}, err
			}
			envs = envs[:0]
		}
	}
	if _, err := db.ExecContext(ctx, "UPDATE "+t.st.Table()+" SET status = 1, done_at = $1", time.Now().Add(-10*24*time.Hour)); err != nil {
		return result{}, err
	}
	if err := analyze(ctx, t); err != nil {
		return result{}, err
	}
	const retention = 7 * 24 * time.Hour
	// Past the end of the partition of now, plus the retention: the rows'
	// partition lies wholly before the cutoff. The plain table's purge runs
	// with the same clock.
	now := time.Now().UTC().Truncate(c.partInterval).Add(c.partInterval + retention + time.Minute)
	// The partitions up to the purge's clock are made before the timing,
	// as the purger of a running service made them over the days before:
	// the timed run measures the removal of the rows.
	if pm, ok := t.st.(purge.PartitionMaintainer); ok {
		if _, _, err := pm.MaintainPartitions(ctx, db, now, core.PurgeParams{}); err != nil {
			return result{}, err
		}
	}
	p, err := purge.New(purge.Config{Store: t.st, DB: db, Retention: retention, Now: func() time.Time { return now }})
	if err != nil {
		return result{}, err
	}
	start, cpu0 := time.Now(), cpuTime()
	deleted, err := p.RunOnce(ctx)
	elapsed := time.Since(start)
	if err != nil {
		return result{}, err
	}
	var left int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+t.st.Table()).Scan(&left); err != nil {
		return result{}, err
	}
	if left != 0 {
		return result{}, fmt.Errorf("%d rows left after the purge (it deleted %d row by row)", left, deleted)
	}
	return result{DB: tg.label(), Workload: "purge", Run: tg.label() + fmt.Sprintf(" (%d by row)", deleted), Events: n,
		Seconds: elapsed.Seconds(), PerSec: float64(n) / elapsed.Seconds(), CPUSeconds: (cpuTime() - cpu0).Seconds()}, nil
}
