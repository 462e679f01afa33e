package main

import (
	"fmt"
	"io"
	"math"
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
	fmt.Fprintf(w, "\nW1: %d writers, %d business transactions with one ~200-byte event each, consumers running; W2: drain of %d pre-written events. Ratios to the hand-written SQL of the same run. Latency from the writer's COMMIT returning, ms.\n\n",
		c.writers, c.w1Events, c.w2Events)
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
			w1 := rate(o.W1PerSec, o.W1Ratio)
			if o.W1Error != "" {
				w1 += " (" + o.W1Error + ")"
			}
			w2 := rate(o.W2PerSec, o.W2Ratio)
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
