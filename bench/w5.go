package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/procstat"
	"github.com/outboxkit/outbox/internal/testsupport/ordercheck"
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

// w5ChildEnv carries a child's w5ChildConfig, as JSON: its presence makes the
// command a W5 child.
const w5ChildEnv = "OUTBOX_BENCH_W5_CHILD"

// w5ChildConfig is what a W5 child is told.
type w5ChildConfig struct {
	DB         string  `json:"db"`
	SQLitePath string  `json:"sqlite_path,omitempty"`
	Table      string  `json:"table"`
	AggTable   string  `json:"agg_table"`
	Ordered    bool    `json:"ordered"`
	Txs        int     `json:"txs"`
	Writers    int     `json:"writers"`
	Keys       int     `json:"keys"`
	Fail       float64 `json:"fail"`
	Hot        float64 `json:"hot"`
	Seed       uint64  `json:"seed"`
	Out        string  `json:"out"`
	// Profile, when not "", is the prefix of the CPU, block and mutex
	// profiles the child writes.
	Profile string `json:"profile,omitempty"`
	// Trace: time every statement of every transaction (see w5trace.go).
	Trace bool `json:"trace,omitempty"`
	// NoCounter: the transactions do not lock and add to their aggregate's
	// counter; the events are numbered by the store's seq (ordered runs
	// only) and the unordered baseline is not checked for order.
	NoCounter bool `json:"no_counter,omitempty"`

	Workers      int           `json:"workers"`
	HotQueue     int           `json:"hot_queue"`
	ColdQueue    int           `json:"cold_queue"`
	PollBatch    int           `json:"poll_batch"`
	PollMaxBatch int           `json:"poll_max_batch"`
	PollInterval time.Duration `json:"poll_interval"`
	BusyInterval time.Duration `json:"busy_interval"`
	DoneBatch    int           `json:"done_batch"`
	DoneLinger   time.Duration `json:"done_linger"`
	NoWake       bool          `json:"no_wake"`
}

// w5Delivery is one listener call of a child.
type w5Delivery struct {
	ID     string `json:"id"`
	Key    string `json:"k"`
	N      int64  `json:"n"`
	Start  int64  `json:"s"` // Unix ns
	Finish int64  `json:"f"` // Unix ns
	OK     bool   `json:"ok"`
}

// w5Durations are the durations of one kind of store call in a child.
type w5Durations struct {
	Ns    []int64 `json:"ns"`
	Rows  int     `json:"rows"`
	Fails int     `json:"fails"`
}

func w5DurationsOf(s *opStats) w5Durations {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := w5Durations{Ns: make([]int64, len(s.durs)), Rows: s.rows, Fails: s.fails}
	for i, d := range s.durs {
		out.Ns[i] = int64(d)
	}
	return out
}

// add appends o's durations to w's.
func (w *w5Durations) add(o w5Durations) {
	w.Ns = append(w.Ns, o.Ns...)
	w.Rows += o.Rows
	w.Fails += o.Fails
}

// sorted returns the durations, sorted.
func (w w5Durations) sorted() []time.Duration {
	out := make([]time.Duration, len(w.Ns))
	for i, ns := range w.Ns {
		out[i] = time.Duration(ns)
	}
	slices.Sort(out)
	return out
}

func (w w5Durations) addTo(s *opStats) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ns := range w.Ns {
		s.durs = append(s.durs, time.Duration(ns))
	}
	s.calls += len(w.Ns)
	s.rows += w.Rows
	s.fails += w.Fails
}

// w5ChildResult is what a child writes to its Out file when it stops.
type w5ChildResult struct {
	Deliveries            []w5Delivery `json:"deliveries"`
	Inserts, Claims, Done w5Durations
	Txs                   int         `json:"txs"`
	Events                int         `json:"events"`
	Retries               int         `json:"retries"`
	Hot                   int64       `json:"hot"`
	StoreErrors           int64       `json:"store_errors"`
	Trace                 []w5TxTrace `json:"trace,omitempty"`
	// Per event recorded DONE by this process after its successful
	// delivery here: from the delivery's end until the DONE call that
	// recorded it started, and that call's duration (ns).
	DoneWait  []int64 `json:"done_wait_ns"`
	DoneWrite []int64 `json:"done_write_ns"`
	// Commits holds when the transaction of each event this process wrote
	// committed (Unix ns).
	Commits map[string]int64 `json:"commits"`
}

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

func targetNames(tgs []*target) []string {
	var out []string
	for _, tg := range tgs {
		out = append(out, tg.name)
	}
	return out
}

// printW5 prints the W5 table of tg and returns its results.
func printW5(c *config, tg *target, kinds []*w5Kind) []result {
	fmt.Printf("\nW5 ordered keys across two processes, %s: %d transactions a run (1 event of one of %d keys, or 2 or 3 in %.0f%%; "+
		"%.0f%% through the hot path), %.0f%% listener failures (backoff 5-50 ms), 2 processes x %d writers, %d rounds; ratio to the unordered run\n",
		tg.name, c.w5Txs, c.w5Keys, 100*w5Multi, 100*c.w5Hot, 100*c.w5Fail, c.w5Writers, c.w5Rounds)
	fmt.Printf("| %-24s | %6s | %5s | %-16s | %6s | %4s | %4s | %10s | %-26s | %5s | %6s | %6s |\n",
		"run", "tx/s", "ratio", "per round", "events", "dups", "lost", "violations", "DONE writes p50/p99/max ms", "hot %", "Go µs", "DB µs")
	fmt.Printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", dashes(26), dashes(8), dashes(7), dashes(18), dashes(8), dashes(6), dashes(6),
		dashes(12), dashes(28), dashes(7), dashes(8), dashes(8))
	var rs []result
	var base float64
	for _, k := range kinds {
		var r result
		r.DB, r.Workload, r.Run = tg.name, "W5", k.name()
		var stats callStats
		var events, dups, lost, violations, txs int
		var hot int64
		var serverKnown = true
		unchecked := false
		var wait, write, handover []int64
		for _, o := range k.outcomes {
			txs += o.txs
			events += o.events
			r.Seconds += o.seconds
			dups += o.duplicates
			lost += o.lost
			if o.violations < 0 {
				unchecked = true
			}
			violations += max(o.violations, 0)
			hot += o.hot
			r.StoreErrors += o.storeErrors
			r.CPUSeconds += o.cpu
			if o.serverCPU < 0 {
				serverKnown = false
			}
			r.ServerCPUSeconds += o.serverCPU
			r.RoundRates = append(r.RoundRates, float64(o.txs)/o.seconds)
			wait, write = append(wait, o.doneWait...), append(write, o.doneWrite...)
			handover = append(handover, o.handover...)
			o.inserts.addTo(&stats.inserts)
			o.claims.addTo(&stats.claims)
			o.done.addTo(&stats.done)
		}
		if !serverKnown {
			r.ServerCPUSeconds = -1
		}
		r.Events, r.Duplicates, r.Rounds = events, dups, len(k.outcomes)
		r.PerSec = float64(txs) / r.Seconds
		r.HotPct = 100 * float64(hot) / float64(max(events, 1))
		done := w5DurationsOf(&stats.done).sorted()
		r.P50Ms, r.P99Ms, r.MaxMs = ms(percentile(done, 0.5)), ms(percentile(done, 0.99)), ms(percentile(done, 1))
		r.StoreStats = stats.String() + "; per event, delivery to DONE written (p50 / p99 ms): " + p5099(sumNs(wait, write)) +
			" = waiting for its DONE call " + p5099(wait) + " + the call " + p5099(write)
		if k.ordered {
			r.StoreStats += fmt.Sprintf("; key hand-over, an event's delivery to its committed successor's (p50 / p99 ms, %d pairs): %s",
				len(handover), p5099(handover))
		}
		r.Violations, r.Lost = violations, lost
		if unchecked {
			r.Violations = -1
		}
		if k.ordered {
			r.Keys = c.w5Keys
		} else {
			base = r.PerSec
		}
		rs = append(rs, r)
	}
	for i := range rs {
		if base > 0 {
			rs[i].Ratio = rs[i].PerSec / base
			rs[i].Baseline = "unordered, 2 processes"
		}
		r := rs[i]
		violations := fmt.Sprint(r.Violations)
		if r.Violations < 0 {
			violations = "not checked"
		}
		fmt.Printf("| %-24s | %6.0f | %5.2f | %-16s | %6d | %4d | %4d | %10s | %-26s | %5.1f | %6.0f | %6s |\n",
			r.Run, r.PerSec, r.Ratio, units(r.RoundRates, 16), r.Events, r.Duplicates, r.Lost, violations,
			fmt.Sprintf("%.1f / %.1f / %.0f", r.P50Ms, r.P99Ms, r.MaxMs), r.HotPct, r.cpuPerEvent(), r.serverCPUPerEvent(tg))
	}
	fmt.Println("  tx/s: transactions from the start signal until every event is DONE; violations: listener calls out of a key's order")
	fmt.Println("  (expected in the unordered run, which does not order); DONE writes: MarkDoneOrdered (ordered) or MarkDoneBatch calls;")
	fmt.Println("  hot %: hand-offs to a hot queue per event (after COMMIT, or a promoted successor); Go µs: CPU per event of both processes;")
	fmt.Println("  DB µs: of the server (PostgreSQL: the processes' backends; MariaDB: the whole server).")
	for _, k := range kinds {
		for i, o := range k.outcomes {
			if o.firstViolation != "" && k.ordered {
				fmt.Printf("  %s, round %d, first violation: %s\n", k.name(), i+1, o.firstViolation)
			}
		}
	}
	printStats(rs)
	return rs
}

// sumNs returns a[i] + b[i].
func sumNs(a, b []int64) []int64 {
	out := make([]int64, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
}

// p5099 formats the p50 and p99 of ns, nanoseconds, in milliseconds.
func p5099(ns []int64) string {
	return fmt.Sprintf("%.1f / %.1f", ms(percentile(w5Durations{Ns: ns}.sorted(), 0.5)), ms(percentile(w5Durations{Ns: ns}.sorted(), 0.99)))
}

// units renders rates as "72 70 75", cut to width.
func units(rates []float64, width int) string {
	var parts []string
	for _, v := range rates {
		parts = append(parts, fmt.Sprintf("%.0f", v))
	}
	out := strings.Join(parts, " ")
	if len(out) > width {
		out = out[:width-3] + "..."
	}
	return out
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

// w5Handover returns, for each event of a key whose successor was already
// committed when its successful delivery finished, the time from that
// finish until the successor's first delivery started (ns): what ordering
// adds between two events of a key that were both ready (the DONE write,
// the promotion of the successor and its hand-off to a worker).
func w5Handover(ds []w5Delivery, commits map[string]int64) []int64 {
	type call struct {
		start, finish int64
		id            string
	}
	first := map[[2]any]call{} // (key, n): its first call
	done := map[[2]any]call{}  // (key, n): its first successful call
	for _, d := range ds {
		k := [2]any{d.Key, d.N}
		if c, ok := first[k]; !ok || d.Start < c.start {
			first[k] = call{d.Start, d.Finish, d.ID}
		}
		if c, ok := done[k]; d.OK && (!ok || d.Start < c.start) {
			done[k] = call{d.Start, d.Finish, d.ID}
		}
	}
	var out []int64
	for k, c := range done {
		next, ok := first[[2]any{k[0], k[1].(int64) + 1}]
		if !ok {
			continue
		}
		if at, ok := commits[next.id]; !ok || at > c.finish {
			continue // the successor was not committed yet
		}
		out = append(out, next.start-c.finish)
	}
	return out
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

// w5Check counts the calls, duplicates, lost events and, with order, order
// violations of the deliveries ds of a run that wrote o.events events.
func w5Check(o *w5Outcome, ds []w5Delivery, order bool) {
	ok := map[string]int{}
	for _, d := range ds {
		o.calls++
		if d.OK {
			ok[d.ID]++
		} else {
			o.failedCalls++
		}
	}
	for _, n := range ok {
		o.duplicates += n - 1
	}
	o.lost = o.events - len(ok)
	if !order {
		o.violations = -1
		return
	}
	// A call's start and finish are two points in time; at a tie the finish
	// comes first (a successor may start the instant its predecessor ends).
	type point struct {
		at    int64
		start bool
		d     *w5Delivery
	}
	pts := make([]point, 0, 2*len(ds))
	for i := range ds {
		pts = append(pts, point{ds[i].Start, true, &ds[i]}, point{ds[i].Finish, false, &ds[i]})
	}
	slices.SortStableFunc(pts, func(a, b point) int {
		if c := cmp.Compare(a.at, b.at); c != 0 {
			return c
		}
		switch {
		case a.start == b.start:
			return 0
		case a.start:
			return 1
		default:
			return -1
		}
	})
	chk := ordercheck.New()
	for _, p := range pts {
		if p.start {
			chk.Start(p.d.Key, p.d.N)
		} else {
			chk.Finish(p.d.Key, p.d.N, p.d.OK)
		}
	}
	n, first := chk.Violations()
	o.violations = n
	if len(first) > 0 {
		o.firstViolation = first[0]
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

// w5Proc is a running W5 child.
type w5Proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // its stdout, closed at EOF
	stderr bytes.Buffer
	out    string
	exited bool
}

func startW5Child(exe string, cc w5ChildConfig) (*w5Proc, error) {
	js, err := json.Marshal(cc)
	if err != nil {
		return nil, err
	}
	p := &w5Proc{cmd: exec.Command(exe), lines: make(chan string, 16), out: cc.Out}
	p.cmd.Env = append(os.Environ(), w5ChildEnv+"="+string(js))
	p.cmd.Stderr = &p.stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start W5 child: %w", err)
	}
	go func() { // owned: ends at the child's EOF, which finish and kill wait for
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p, nil
}

// expect returns the next line of the child's stdout starting with prefix,
// skipping others.
func (p *w5Proc) expect(prefix string, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				return "", fmt.Errorf("W5 child exited before printing %q; stderr:\n%s", prefix, p.errText())
			}
			if strings.HasPrefix(l, prefix) {
				return l, nil
			}
		case <-t.C:
			return "", fmt.Errorf("W5 child printed no %q within %s", prefix, timeout)
		}
	}
}

// errText returns the child's stderr once it has exited.
func (p *w5Proc) errText() string {
	p.wait()
	return p.stderr.String()
}

// wait drains stdout and reaps the child.
func (p *w5Proc) wait() {
	if p.exited {
		return
	}
	for range p.lines {
	}
	_ = p.cmd.Wait()
	p.exited = true
}

// finish tells the child to stop (its stdin closes), waits for it, and
// returns its result and CPU time.
func (p *w5Proc) finish(timeout time.Duration) (w5ChildResult, float64, error) {
	var res w5ChildResult
	_ = p.stdin.Close()
	if _, err := p.expect("stopped", timeout); err != nil {
		return res, 0, err
	}
	p.wait()
	if !p.cmd.ProcessState.Success() {
		return res, 0, fmt.Errorf("W5 child: %s; stderr:\n%s", p.cmd.ProcessState, p.stderr.String())
	}
	b, err := os.ReadFile(p.out)
	if err != nil {
		return res, 0, err
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return res, 0, fmt.Errorf("W5 child result: %w", err)
	}
	cpu := (p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()).Seconds()
	return res, cpu, nil
}

// kill ends a child that is still running.
func (p *w5Proc) kill() {
	if p.exited {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.stdin.Close()
	p.wait()
}

// w5Writes runs the child's writers: cc.Writers goroutines commit cc.Txs
// transactions between them through write, which is given the goroutine's
// random source, and return the events written and the retries.
func w5Writes(ctx context.Context, cc w5ChildConfig, write func(ctx context.Context, rng *rand.Rand) (events, retries int, err error)) (txs, events, retries int, err error) {
	var (
		mu    sync.Mutex
		next  int
		wg    sync.WaitGroup
		first error
	)
	for g := range cc.Writers {
		rng := rand.New(rand.NewPCG(cc.Seed, uint64(g)))
		wg.Go(func() {
			for {
				mu.Lock()
				if next >= cc.Txs || first != nil {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				n, r, err := write(ctx, rng)
				mu.Lock()
				retries += r
				if err != nil {
					first = cmp.Or(first, err)
				} else {
					txs++
					events += n
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return txs, events, retries, first
}
