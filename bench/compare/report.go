package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/outboxkit/outbox/internal/procstat"
)

func rate(v, ratio float64) string {
	if v == 0 {
		return "–"
	}
	s := commas(v)
	if ratio > 0 {
		s += fmt.Sprintf(" (%.2fx)", ratio)
	}
	return s
}

func commas(v float64) string {
	s := fmt.Sprintf("%d", int64(math.Round(v)))
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// medians folds the rounds of each contender on each server into one
// outcome: the median of every figure (of the rounds that measured it),
// the range of the rates, the duplicates and missing events of all rounds.
func medians(all []outcome) []outcome {
	type key struct{ db, contender string }
	var keys []key
	groups := map[key][]outcome{}
	for _, o := range all {
		k := key{o.DB, o.Contender}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], o)
	}
	out := make([]outcome, 0, len(keys))
	for _, k := range keys {
		g := groups[k]
		m := g[0]
		m.Round, m.Rounds = 0, len(g)
		med := func(f func(o *outcome) float64) float64 {
			var v []float64
			for i := range g {
				if x := f(&g[i]); x > 0 {
					v = append(v, x)
				}
			}
			if len(v) == 0 {
				return 0
			}
			slices.Sort(v)
			if len(v)%2 == 1 {
				return v[len(v)/2]
			}
			return (v[len(v)/2-1] + v[len(v)/2]) / 2
		}
		span := func(f func(o *outcome) float64) [2]float64 {
			r := [2]float64{math.Inf(1), 0}
			for i := range g {
				if x := f(&g[i]); x > 0 {
					r[0], r[1] = min(r[0], x), max(r[1], x)
				}
			}
			if r[1] == 0 {
				return [2]float64{}
			}
			return r
		}
		m.W1PerSec, m.W1Range = med(func(o *outcome) float64 { return o.W1PerSec }), span(func(o *outcome) float64 { return o.W1PerSec })
		m.W2PerSec, m.W2Range = med(func(o *outcome) float64 { return o.W2PerSec }), span(func(o *outcome) float64 { return o.W2PerSec })
		m.W1Ratio = med(func(o *outcome) float64 { return o.W1Ratio })
		m.W2Ratio = med(func(o *outcome) float64 { return o.W2Ratio })
		m.P50Ms = med(func(o *outcome) float64 { return o.P50Ms })
		m.P99Ms = med(func(o *outcome) float64 { return o.P99Ms })
		m.W1GoUs = med(func(o *outcome) float64 { return o.W1GoUs })
		m.W1DBUs = med(func(o *outcome) float64 { return o.W1DBUs })
		m.W1Allocs = med(func(o *outcome) float64 { return o.W1Allocs })
		m.W1Missing, m.W2Missing, m.Duplicates = 0, 0, 0
		var errs1, errs2 []string
		for _, o := range g {
			m.W1Missing += o.W1Missing
			m.W2Missing += o.W2Missing
			m.Duplicates += o.Duplicates
			if o.W1Error != "" {
				errs1 = append(errs1, fmt.Sprintf("round %d: %s", o.Round, o.W1Error))
			}
			if o.W2Error != "" {
				errs2 = append(errs2, fmt.Sprintf("round %d: %s", o.Round, o.W2Error))
			}
		}
		if len(g) > 1 {
			m.W1Error, m.W2Error = strings.Join(errs1, "; "), strings.Join(errs2, "; ")
		}
		out = append(out, m)
	}
	return out
}

// spread is the range of a median's rounds, for its table cell.
func spread(o *outcome, r [2]float64) string {
	if o.Rounds < 2 || r[1] == 0 {
		return ""
	}
	return fmt.Sprintf(" [%s-%s]", commas(r[0]), commas(r[1]))
}

func latency(o *outcome) string {
	if o.P50Ms == 0 && o.P99Ms == 0 {
		return "–"
	}
	return fmt.Sprintf("%s / %s", msStr(o.P50Ms), msStr(o.P99Ms))
}

func msStr(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.3f", v)
}

// printTable prints the run's table in Markdown: one row per contender, the
// servers side by side, each rate with its ratio to the hand-written SQL.
func printTable(w io.Writer, c *config, ks []*kind, all []outcome, srvs []*server) {
	fmt.Fprintf(w, "\nW1: %d writers, %d business transactions with one ~200-byte event each, consumers running; W2: drain of %d pre-written events. Ratios to the hand-written SQL of the same run. Latency from the writer's COMMIT returning, ms.\n",
		c.writers, c.w1Events, c.w2Events)
	if c.rounds > 1 {
		fmt.Fprintf(w, "Every figure is the median of %d rounds (each round in an order rotated by one contender; a ratio is the median of the rounds' ratios), the lowest and highest rate in brackets; duplicates and missing events are those of all rounds.\n", c.rounds)
	}
	fmt.Fprintln(w)
	head := "| contender |"
	sep := "|---|"
	for _, s := range srvs {
		head += fmt.Sprintf(" %s W1 ev/s | %s W1 p50 / p99 ms | %s W2 ev/s |", s.name, s.name, s.name)
		sep += "---|---|---|"
	}
	fmt.Fprintln(w, head+" duplicates |")
	fmt.Fprintln(w, sep+"---|")
	for _, k := range ks {
		row := "| " + k.name + " |"
		dups := []string{}
		ran := false
		for _, s := range srvs {
			var o *outcome
			for i := range all {
				if all[i].DB == s.name && all[i].Contender == k.name {
					o = &all[i]
				}
			}
			if o == nil {
				row += " – | – | – |"
				continue
			}
			ran = true
			w1 := rate(o.W1PerSec, o.W1Ratio) + spread(o, o.W1Range)
			if o.W1Error != "" {
				w1 += " (" + o.W1Error + ")"
			}
			w2 := rate(o.W2PerSec, o.W2Ratio) + spread(o, o.W2Range)
			if o.W2Error != "" {
				w2 += " (" + o.W2Error + ")"
			}
			row += fmt.Sprintf(" %s | %s | %s |", w1, latency(o), w2)
			if !k.noConsum {
				dups = append(dups, fmt.Sprintf("%d %s", o.Duplicates, s.name))
			}
		}
		if !ran {
			continue
		}
		d := strings.Join(dups, ", ")
		if d == "" {
			d = "–"
		}
		fmt.Fprintln(w, row+" "+d+" |")
	}
	fmt.Fprintln(w, "\nW1 CPU per event, µs: this process / the server (PostgreSQL: the backends of this run's connections; MariaDB: the whole server, other clients included); this process's heap allocations per event.")
	fmt.Fprintln(w)
	head, sep = "| contender |", "|---|"
	for _, s := range srvs {
		head += fmt.Sprintf(" %s W1 Go / DB µs |", s.name)
		sep += "---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	for _, k := range ks {
		row, ran := "| "+k.name+" |", false
		for _, s := range srvs {
			cell := "–"
			for i := range all {
				if all[i].DB == s.name && all[i].Contender == k.name {
					cell, ran = cpuCell(&all[i]), true
				}
			}
			row += " " + cell + " |"
		}
		if ran {
			fmt.Fprintln(w, row)
		}
	}
	fmt.Fprintln(w, "\nSettings:")
	for _, k := range ks {
		fmt.Fprintf(w, "- %s: %s\n", k.name, k.settings)
	}
	for _, n := range notRun {
		fmt.Fprintf(w, "- %s\n", n)
	}
	fmt.Fprintf(w, "\nload average after the run: %s\n", procstat.LoadAvg())
}
