package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/outboxkit/outbox/internal/testsupport/ordercheck"
)

// What a W5 run's deliveries say (duplicates, lost events, order violations,
// the key hand-over) and how the W5 table is printed.

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
