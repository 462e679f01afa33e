package main

import (
	"fmt"
	"runtime"
	"strings"
)

// result is one run of one workload on one database.
type result struct {
	DB       string  `json:"db"`
	Workload string  `json:"workload"`
	Run      string  `json:"run"`
	Events   int     `json:"events"`
	Seconds  float64 `json:"seconds"`
	PerSec   float64 `json:"events_per_sec"`
	// Ratio is PerSec over the PerSec of Baseline, measured in the same run.
	Ratio    float64 `json:"ratio"`
	Baseline string  `json:"baseline"`
	// W1: commit-to-listener latency and the share of events the hot path
	// delivered.
	P50Ms  float64 `json:"p50_ms,omitempty"`
	P99Ms  float64 `json:"p99_ms,omitempty"`
	MaxMs  float64 `json:"max_ms,omitempty"`
	HotPct float64 `json:"hot_pct,omitempty"`
	// CPUSeconds is the CPU time the bench process (the outbox, the
	// drivers and the workload's goroutines) used during the run; the rest
	// of the two cores went to the database and other processes.
	CPUSeconds float64 `json:"go_cpu_seconds"`
	// ServerCPUSeconds is the CPU time the database server's processes
	// used during the run, where the bench could read it (the server on
	// this machine; W2 only): 0 for SQLite, -1 when unknown.
	ServerCPUSeconds float64 `json:"server_cpu_seconds,omitempty"`
	// Duplicates counts deliveries of an event already delivered.
	Duplicates  int   `json:"duplicates"`
	StoreErrors int64 `json:"store_errors"`
	// W2: delivery rate per reporting interval, and the process's peak RSS
	// during the drain and its growth over the RSS at the start of it.
	Rates []float64 `json:"rates_per_interval,omitempty"`
	// Soak: the windows of a soak run (-w soak).
	Soak []soakWindow `json:"soak_windows,omitempty"`
	// EndStart is how much a drain slowed: see endStart.
	EndStart     float64 `json:"end_over_start,omitempty"`
	PeakRSSMiB   float64 `json:"peak_rss_mib,omitempty"`
	RSSGrowthMiB float64 `json:"rss_growth_mib,omitempty"`
	// Rounds is how many alternating rounds the run was split into, and
	// RoundRates the events/s of each.
	Rounds     int       `json:"rounds,omitempty"`
	RoundRates []float64 `json:"round_rates,omitempty"`
	// W4: the writers' transaction time (p50) and the claims per second
	// all instances send once idle.
	TxP50Ms          float64 `json:"tx_p50_ms,omitempty"`
	FirstMs          float64 `json:"first_ms,omitempty"`
	IdleClaimsPerSec float64 `json:"idle_claims_per_sec,omitempty"`
	// StoreStats summarises the claims and DONE writes of the run.
	StoreStats string `json:"store_stats,omitempty"`
	// W1 ordered (Keys > 0): the rate over the unordered "outbox, 1
	// instance" of the same run, and the latencies split into the events
	// written as their key's head (NEW, for the hot path at once; HeadPct
	// of them) and those written WAITING behind an unfinished event of
	// their key.
	Keys        int     `json:"ordered_keys,omitempty"`
	VsUnordered float64 `json:"ratio_to_unordered,omitempty"`
	HeadPct     float64 `json:"head_pct,omitempty"`
	HeadP50Ms   float64 `json:"head_p50_ms,omitempty"`
	HeadP99Ms   float64 `json:"head_p99_ms,omitempty"`
	WaitedP50Ms float64 `json:"waited_p50_ms,omitempty"`
	WaitedP99Ms float64 `json:"waited_p99_ms,omitempty"`
	// W5: listener calls out of a key's order (-1: not checked), and events
	// never delivered.
	Violations int `json:"order_violations,omitempty"`
	Lost       int `json:"lost,omitempty"`
}

func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func printW1(tg *target, c *config, rs []result) {
	fmt.Printf("\nW1 live, %s: %d transactions (business row + one ~200 B event), %d writers, %d rounds; ratio to business + raw outbox INSERT\n",
		tg.name, rs[len(rs)-1].Events, c.writers, c.rounds)
	fmt.Printf("| %-28s | %9s | %5s | %-20s | %7s | %7s | %7s | %5s | %4s | %6s | %6s |\n", "run", "events/s", "ratio", "per round", "p50 ms", "p99 ms", "max ms", "hot %", "dups", "Go µs", "DB µs")
	fmt.Printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", dashes(30), dashes(11), dashes(7), dashes(22), dashes(9), dashes(9), dashes(9), dashes(7), dashes(6), dashes(8), dashes(8))
	for _, r := range rs {
		rounds := kilos(r.RoundRates, 20)
		if r.P99Ms == 0 && r.MaxMs == 0 {
			fmt.Printf("| %-28s | %9s | %5.2f | %-20s | %7s | %7s | %7s | %5s | %4s | %6.0f | %6s |\n", r.Run, thousands(r.PerSec), r.Ratio, rounds, "", "", "", "", "", r.cpuPerEvent(), r.serverCPUPerEvent(tg))
			continue
		}
		fmt.Printf("| %-28s | %9s | %5.2f | %-20s | %7.3f | %7.3f | %7.1f | %5.1f | %4d | %6.0f | %6s |\n", r.Run, thousands(r.PerSec), r.Ratio,
			rounds, r.P50Ms, r.P99Ms, r.MaxMs, r.HotPct, r.Duplicates, r.cpuPerEvent(), r.serverCPUPerEvent(tg))
	}
	fmt.Println("  Go µs, DB µs: CPU time per event of this process (outbox, drivers and workload) and of the database server (PostgreSQL: the backends of the bench's connections; MariaDB: the whole server; \"-\": SQLite runs inside the bench).")
	for _, r := range rs {
		if r.Keys == 0 {
			continue
		}
		fmt.Printf("  %s: %.2fx the unordered outbox; written as head (hot path) %.1f%%: p50 %.3f ms, p99 %.3f ms; written waiting %.1f%%: p50 %.1f ms, p99 %.1f ms\n",
			r.Run, r.VsUnordered, r.HeadPct, r.HeadP50Ms, r.HeadP99Ms, 100-r.HeadPct, r.WaitedP50Ms, r.WaitedP99Ms)
	}
	printStats(rs)
}

// kilos renders rates as "12.3k 11.9k", cut to width.
func kilos(rates []float64, width int) string {
	var parts []string
	for _, v := range rates {
		parts = append(parts, fmt.Sprintf("%.1fk", v/1000))
	}
	out := strings.Join(parts, " ")
	if len(out) > width {
		out = out[:width-3] + "..."
	}
	return out
}

func printW2(tg *target, c *config, rs []result) {
	if c.noRaw {
		fmt.Printf("\nW2 backlog, %s: %d pending rows; no raw baseline (-no-raw)\n", tg.name, c.w2Events)
	} else {
		fmt.Printf("\nW2 backlog, %s: %d pending rows%s; ratio to the mean of the two raw claim-and-mark runs\n", tg.name, c.w2Events, listenerNote(c))
	}
	fmt.Printf("| %-30s | %9s | %5s | %-34s | %4s | %-17s | %5s | %5s |\n", "run", "events/s", "ratio", fmt.Sprintf("events/s per %s", c.every), "dups", "peak RSS (growth)", "Go µs", "DB µs")
	fmt.Printf("|%s|%s|%s|%s|%s|%s|%s|%s|\n", dashes(32), dashes(11), dashes(7), dashes(36), dashes(6), dashes(19), dashes(7), dashes(7))
	for _, r := range rs {
		series := kilos(r.Rates, 34)
		rss := ""
		if r.PeakRSSMiB > 0 {
			rss = fmt.Sprintf("%.0f MiB (+%.0f)", r.PeakRSSMiB, r.RSSGrowthMiB)
		}
		dups := ""
		if r.Workload == "W2" && r.PeakRSSMiB > 0 {
			dups = fmt.Sprint(r.Duplicates)
		}
		fmt.Printf("| %-30s | %9s | %5.2f | %-34s | %4s | %-17s | %5.1f | %5s |\n", r.Run, thousands(r.PerSec), r.Ratio, series, dups, rss, r.cpuPerEvent(), r.serverCPUPerEvent(tg))
	}
	fmt.Printf("  Go µs, DB µs: CPU time per event of the bench process and of the database server (PostgreSQL: the backends of the bench's connections; MariaDB: the whole server, other clients included; \"-\": SQLite runs inside the bench); on a quiet machine of %d cores a run reaches at most %d s / (Go µs + DB µs) events/s.\n", runtime.NumCPU(), runtime.NumCPU())
	for _, r := range rs {
		if len(r.Rates) > 0 && len(kilos(r.Rates, 1<<20)) > 34 {
			fmt.Printf("  %s, events/s per %s: %s\n", r.Run, c.every, kilos(r.Rates, 1<<20))
		}
	}
	for _, r := range rs {
		if r.EndStart > 0 {
			fmt.Printf("  %s: end/start %.2f (mean rate of the last tenth of the %s intervals over the first tenth, at least three each)\n", r.Run, r.EndStart, c.every)
		}
	}
	printStats(rs)
}

// endStart returns how much a drain slowed: the mean rate of the last tenth
// of its intervals (at least three) over that of the first tenth, leaving
// out the interval in which the drain ended and any after it (no events, the
// final check that no row is pending). It returns 0 with fewer than six
// intervals.
func endStart(rates []float64) float64 {
	for len(rates) > 0 && rates[len(rates)-1] == 0 {
		rates = rates[:len(rates)-1]
	}
	if len(rates) > 0 {
		rates = rates[:len(rates)-1]
	}
	if len(rates) < 6 {
		return 0
	}
	k := max(3, len(rates)/10)
	mean := func(xs []float64) float64 {
		var sum float64
		for _, x := range xs {
			sum += x
		}
		return sum / float64(len(xs))
	}
	start := mean(rates[:k])
	if start == 0 {
		return 0
	}
	return mean(rates[len(rates)-k:]) / start
}

// printStats prints the store-call summary of each run that has one.
func printStats(rs []result) {
	for _, r := range rs {
		if r.StoreStats != "" {
			fmt.Printf("  %s: %s\n", r.Run, r.StoreStats)
		}
	}
}

// cpuPerEvent returns the bench process's CPU microseconds per event.
func (r result) cpuPerEvent() float64 { return r.CPUSeconds * 1e6 / float64(max(r.Events, 1)) }

// serverCPUPerEvent formats the server's CPU µs per event, "?" when
// unknown and "-" for SQLite.
func (r result) serverCPUPerEvent(tg *target) string {
	switch {
	case tg.serverPIDs == nil:
		return "-"
	case r.ServerCPUSeconds < 0:
		return "?"
	}
	return fmt.Sprintf("%.1f", r.ServerCPUSeconds*1e6/float64(max(r.Events, 1)))
}

func dashes(n int) string { return strings.Repeat("-", n) }
