package main

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/procstat"
)

// W5: ordered keys written and delivered by two processes.
//
// Two outbox processes (this command started again as children, each with
// its own pool, dispatcher, poller and writers) commit -w5-tx business
// transactions between them on one table. A transaction takes one of
// -w5-keys aggregates at random, adds to the aggregate's counter (an UPDATE
// of its row, which it locks until COMMIT, as a business transaction that
// changes the aggregate does) and writes 1 to 3 events of that aggregate
// numbered by the counter, so that per key the commit order is fixed by the
// business transaction itself; -w5-hot of the transactions are written
// through the context-carried transaction (the hot path), the rest with
// WriteTx on a plain *sql.Tx (left for the pollers, of either process). A
// listener call fails with probability -w5-fail, retried after 5-50 ms.
//
// Each round runs it with the aggregate type ordered per key and, as its
// baseline, with the same transactions unordered; rounds alternate the runs
// and the databases. A run reports transactions/s from the start signal
// until every event is DONE, duplicates, lost events, order violations (from
// the listener calls of both processes, by their wall-clock times, against
// the counter's numbering; the unordered baseline has many, and they are
// only counted), the durations of the DONE writes (MarkDoneOrdered, or
// MarkDoneBatch unordered), per event the time from its delivery until its
// DONE was written (the wait for its DONE call, and the call), and, ordered,
// the key hand-over: from an event's delivery until its successor's, when
// the successor was already committed.
//
// Diagnosis: -w5-trace times every statement of every transaction
// (w5trace.go), -w5-sample samples the database's sessions (w5sample.go),
// -w5-profile writes the processes' pprof profiles.

// w5Outcome is one W5 run.
type w5Outcome struct {
	txs, events, retries int
	seconds              float64
	duplicates, lost     int
	violations           int
	firstViolation       string
	hot, storeErrors     int64
	calls, failedCalls   int
	inserts, claims      w5Durations // of both processes
	done                 w5Durations
	doneWait, doneWrite  []int64 // per event: see w5ChildResult
	handover             []int64 // ordered: see w5Handover
	cpu, serverCPU       float64 // seconds: both children, and the server (-1 unknown)
}

// w5Kind is one row of the W5 table: a database, ordered or not.
type w5Kind struct {
	tg       *target
	ordered  bool
	outcomes []w5Outcome
}

func (k *w5Kind) name() string {
	if k.ordered {
		return "ordered, 2 processes"
	}
	return "unordered, 2 processes"
}

// runW5 runs W5 on every target, -w5-rounds rounds of the ordered run and
// its unordered baseline on each, each round starting one run later.
func runW5(ctx context.Context, c *config, tgs []*target) ([]result, error) {
	var kinds []*w5Kind
	for _, tg := range tgs {
		kinds = append(kinds, &w5Kind{tg: tg}, &w5Kind{tg: tg, ordered: true})
	}
	fmt.Printf("\nW5 ordered keys across two processes: %d transactions a run over %d keys, %d rounds, on %s\n",
		c.w5Txs, c.w5Keys, c.w5Rounds, strings.Join(targetNames(tgs), ", "))
	for round := range c.w5Rounds {
		for i := range kinds {
			k := kinds[(round+i)%len(kinds)]
			fmt.Printf("    round %d: %s %s (load average %s) ...\n", round+1, k.tg.name, k.name(), procstat.LoadAvg())
			o, err := w5Run(ctx, c, k.tg, k.ordered)
			if err != nil {
				return nil, fmt.Errorf("%s W5 %s: %w", k.tg.name, k.name(), err)
			}
			fmt.Printf("      %.0f transactions/s, %d listener calls (%d failed), order violations %s, DONE writes p99 %.1f ms\n",
				float64(o.txs)/o.seconds, o.calls, o.failedCalls,
				map[bool]string{true: fmt.Sprint(o.violations), false: "not checked"}[o.violations >= 0],
				ms(percentile(o.done.sorted(), 0.99)))
			fmt.Printf("      delivery to DONE written, per event (p50 / p99 ms): %s = waiting for its DONE call %s + the call %s\n",
				p5099(sumNs(o.doneWait, o.doneWrite)), p5099(o.doneWait), p5099(o.doneWrite))
			if k.ordered {
				fmt.Printf("      key hand-over, an event's delivery to its committed successor's (p50 / p99 ms, %d pairs): %s\n",
					len(o.handover), p5099(o.handover))
			}
			k.outcomes = append(k.outcomes, o)
		}
	}
	var rs []result
	for _, tg := range tgs {
		var mine []*w5Kind
		for _, k := range kinds {
			if k.tg == tg {
				mine = append(mine, k)
			}
		}
		rs = append(rs, printW5(c, tg, mine)...)
	}
	// Ordered, PostgreSQL against MariaDB: the rate the issue compares.
	rate := map[string]float64{}
	for _, r := range rs {
		if r.Keys > 0 {
			rate[r.DB] = r.PerSec
		}
	}
	if rate["postgres"] > 0 && rate["mysql"] > 0 {
		fmt.Printf("  W5 ordered, PostgreSQL over MySQL/MariaDB: %.2fx (%.0f against %.0f transactions/s, %d cores, rounds alternated)\n",
			rate["postgres"]/rate["mysql"], rate["postgres"], rate["mysql"], runtime.NumCPU())
	}
	return rs, nil
}

// w5Multi is the share of W5 transactions that write 2 or 3 events (half
// each) rather than 1.
const w5Multi = 0.2

// w5Run is one W5 run on tg.
func w5Run(ctx context.Context, c *config, tg *target, ordered bool) (w5Outcome, error) {
	var o w5Outcome
	admin, err := tg.open(2)
	if err != nil {
		return o, err
	}
	defer admin.Close()
	var ordering core.Ordering
	if ordered {
		ordering = core.Ordering{orderAgg.Name(): core.DeadBlocks}
	}
	t, err := newOrderedTable(ctx, tg, admin, "w5", ordering)
	if err != nil {
		return o, err
	}
	defer t.drop(ctx)
	agg, dropAgg, err := w5AggTable(ctx, tg, admin, c.w5Keys)
	if err != nil {
		return o, err
	}
	defer dropAgg()
	dir, err := os.MkdirTemp("", "outbox-bench-w5-")
	if err != nil {
		return o, err
	}
	defer os.RemoveAll(dir)
	exe, err := os.Executable()
	if err != nil {
		return o, err
	}

	var children []*w5Proc
	defer func() {
		for _, ch := range children {
			ch.kill()
		}
	}()
	for i := range 2 {
		cc := w5ChildConfig{
			DB: tg.name, SQLitePath: tg.sqlitePath, Table: t.st.Table(), AggTable: agg, Ordered: ordered,
			Txs: c.w5Txs / 2, Writers: c.w5Writers, Keys: c.w5Keys, Fail: c.w5Fail, Hot: c.w5Hot, Seed: randomSeed(),
			Out:     filepath.Join(dir, fmt.Sprintf("child-%d.json", i)),
			Workers: c.workers, HotQueue: c.hotQueue, ColdQueue: c.coldQueue, PollBatch: c.pollBatch, PollMaxBatch: c.pollMaxBatch,
			PollInterval: c.pollInterval, BusyInterval: c.busyInterval, DoneBatch: c.doneBatch, DoneLinger: c.doneLinger, NoWake: c.noWake,
		}
		if i == 1 {
			cc.Txs = c.w5Txs - c.w5Txs/2
		}
		cc.Trace, cc.NoCounter = c.w5Trace, c.w5NoCounter
		if c.w5Profile != "" {
			cc.Profile = fmt.Sprintf("%s-%s-%s-%d", c.w5Profile, tg.name, map[bool]string{true: "ordered", false: "unordered"}[ordered], i)
		}
		ch, err := startW5Child(exe, cc)
		if err != nil {
			return o, err
		}
		children = append(children, ch)
	}
	for _, ch := range children {
		if _, err := ch.expect("ready", time.Minute); err != nil {
			return o, err
		}
	}
	var smp *w5Sampler
	if c.w5Sample > 0 && ordered {
		smp = startW5Sampler(ctx, tg, c.w5Sample)
	}
	if c.w5Analyze > 0 && tg.analyze != "" {
		stop := w5AnalyzeEvery(ctx, tg, admin, c.w5Analyze, t.st.Table(), t.st.Table()+"_key")
		defer stop()
	}
	cpu0 := tg.cpu()
	start := time.Now()
	for _, ch := range children {
		if _, err := io.WriteString(ch.stdin, "go\n"); err != nil {
			return o, fmt.Errorf("start child: %w", err)
		}
	}
	for _, ch := range children {
		l, err := ch.expect("written ", c.timeout)
		if err != nil {
			return o, err
		}
		var txs, events, retries int
		if _, err := fmt.Sscanf(l, "written txs=%d events=%d retries=%d", &txs, &events, &retries); err != nil {
			return o, fmt.Errorf("child output %q: %w", l, err)
		}
		o.txs, o.events, o.retries = o.txs+txs, o.events+events, o.retries+retries
	}
	doneAt, err := w5WaitDone(ctx, t, o.events, start.Add(c.timeout))
	if err != nil {
		return o, err
	}
	o.seconds = doneAt.Sub(start).Seconds()
	_, o.serverCPU = tg.since(cpu0)
	if smp != nil {
		smp.stop()
	}
	var ds []w5Delivery
	var traced []w5TxTrace
	commits := map[string]int64{}
	for _, ch := range children {
		res, cpu, err := ch.finish(time.Minute)
		if err != nil {
			return o, err
		}
		o.cpu += cpu
		ds = append(ds, res.Deliveries...)
		o.inserts.add(res.Inserts)
		o.claims.add(res.Claims)
		o.done.add(res.Done)
		o.hot += res.Hot
		o.storeErrors += res.StoreErrors
		traced = append(traced, res.Trace...)
		for id, at := range res.Commits {
			commits[id] = at
		}
		o.doneWait = append(o.doneWait, res.DoneWait...)
		o.doneWrite = append(o.doneWrite, res.DoneWrite...)
	}
	children = nil
	w5Check(&o, ds, ordered || !c.w5NoCounter)
	if ordered {
		o.handover = w5Handover(ds, commits)
	}
	if smp != nil {
		smp.print()
	}
	if c.w5Trace {
		printW5Trace(traced)
	}
	return o, nil
}

// w5AnalyzeEvery refreshes the planner statistics of tables every period
// until the returned function is called, as autovacuum's ANALYZE would on a
// server that runs it.
func w5AnalyzeEvery(ctx context.Context, tg *target, db core.DBTX, every time.Duration, tables ...string) func() {
	done, exited := make(chan struct{}), make(chan struct{})
	go func() { // owned: the returned function waits for exited
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			for _, table := range tables {
				if _, err := db.ExecContext(ctx, fmt.Sprintf(tg.analyze, table)); err != nil {
					fmt.Printf("      analyze %s: %v\n", table, err)
				}
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// w5AggTable creates the aggregates' table, one row per key with its
// counter at 0, and returns its name and a drop function.
func w5AggTable(ctx context.Context, tg *target, db core.DBTX, keys int) (string, func(), error) {
	name := uniqueName("w5agg")
	ddl := "CREATE TABLE " + name + " (k VARCHAR(16) PRIMARY KEY, n BIGINT NOT NULL)"
	if tg.name == "mysql" {
		ddl += " ENGINE = InnoDB"
	}
	if _, err := db.ExecContext(ctx, ddl); err != nil {
		return "", nil, fmt.Errorf("create aggregates table: %w", err)
	}
	drop := func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = db.ExecContext(c, "DROP TABLE IF EXISTS "+name)
	}
	var sb strings.Builder
	sb.WriteString("INSERT INTO " + name + " (k, n) VALUES ")
	for i := range keys {
		if i > 0 {
			sb.WriteString(", ")
		}
		fmt.Fprintf(&sb, "('%s', 0)", w5Key(i))
	}
	if _, err := db.ExecContext(ctx, sb.String()); err != nil {
		drop()
		return "", nil, fmt.Errorf("fill aggregates table: %w", err)
	}
	return name, drop, nil
}

func w5Key(i int) string { return fmt.Sprintf("k-%04d", i) }

// w5WaitDone waits until events rows of t are DONE, and returns when that
// was seen.
func w5WaitDone(ctx context.Context, t *table, events int, deadline time.Time) (time.Time, error) {
	q := "SELECT COUNT(*) FROM " + t.st.Table() + " WHERE status = " + fmt.Sprint(int(core.StatusDone))
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int
		if err := t.db.QueryRowContext(ctx, q).Scan(&n); err != nil {
			return time.Time{}, fmt.Errorf("count DONE rows: %w", err)
		}
		if n >= events {
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("timed out: %d of %d events DONE", n, events)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
