package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"time"
)

// contender is one way of getting events from a business transaction to a
// consumer. A value runs one workload once: setup, then (W1) write while
// started, or (W2) fill and then start; then stop and teardown.
type contender interface {
	// setup creates the contender's own uniquely named tables on srv.
	setup(ctx context.Context, srv *server, writers int) error
	// write runs business transaction i (the business row and event i) and
	// calls rec.commit(i) as soon as its COMMIT has returned.
	write(ctx context.Context, i int, rec *recorder) error
	// fill writes events 0..n-1 as a backlog, without consumers running.
	fill(ctx context.Context, n int) error
	// start starts the consumers, which deliver into rec.
	start(ctx context.Context, rec *recorder) error
	// stop stops the consumers; teardown drops the tables.
	stop(ctx context.Context) error
	teardown(ctx context.Context)
}

// kind describes a contender in the table.
type kind struct {
	name     string
	settings string // what it ran with, printed under the table
	pgOnly   bool
	noW2     bool // W1 only (the business transaction alone)
	noConsum bool // nothing consumes (the business transaction alone)
	make     func(c *config) contender
}

// outcome is one contender's figures on one server.
type outcome struct {
	Contender string  `json:"contender"`
	DB        string  `json:"db"`
	Round     int     `json:"round"` // 1, 2, ... (-rounds)
	W1PerSec  float64 `json:"w1_events_per_sec,omitempty"`
	W1Ratio   float64 `json:"w1_ratio_to_hand_sql,omitempty"`
	P50Ms     float64 `json:"w1_p50_ms,omitempty"`
	P99Ms     float64 `json:"w1_p99_ms,omitempty"`
	W1Missing int     `json:"w1_missing,omitempty"`
	// W1GoUs and W1DBUs are the CPU per W1 event of this process and of
	// the server (PostgreSQL: the backends of this run's connections;
	// MariaDB: the whole server, other clients included), from the first
	// write to the last delivery, in µs.
	W1GoUs    float64 `json:"w1_go_us_per_event,omitempty"`
	W1DBUs    float64 `json:"w1_db_us_per_event,omitempty"`
	W1Allocs  float64 `json:"w1_allocs_per_event,omitempty"` // heap objects this process allocated per W1 event
	W1Error   string  `json:"w1_error,omitempty"`
	W2PerSec  float64 `json:"w2_events_per_sec,omitempty"`
	W2Ratio   float64 `json:"w2_ratio_to_hand_sql,omitempty"`
	W2Missing int     `json:"w2_missing,omitempty"`
	W2Error   string  `json:"w2_error,omitempty"`
	// Duplicates are deliveries of an event already delivered, W1 and W2
	// together, counted up to -grace after the last event arrived.
	Duplicates int64 `json:"duplicates"`
	// Rounds, W1Range and W2Range describe a median of several rounds
	// (see medians): how many, and the lowest and highest rates.
	Rounds  int        `json:"-"`
	W1Range [2]float64 `json:"-"`
	W2Range [2]float64 `json:"-"`
	Ran     bool       `json:"-"`
	RanW2   bool       `json:"-"`
}

// startProfile starts a CPU profile of this process into dir (none when
// dir is ""), in a file named after the server and the contender (and the
// round, after the first), and returns what stops it; calling that again
// does nothing.
func startProfile(dir, server, contender string, round int) (stop func(), err error) {
	if dir == "" {
		return func() {}, nil
	}
	slug := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(contender))
	if round > 1 {
		slug += fmt.Sprintf("-round%d", round)
	}
	f, err := os.Create(filepath.Join(dir, server+"-"+slug+".pprof"))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runW1 runs W1 for one contender: its consumers running, c.writers
// goroutines commit c.w1Events business transactions. Throughput runs from
// the first write to the last first-delivery (to the last COMMIT when
// nothing consumes).
func runW1(ctx context.Context, c *config, srv *server, k *kind, out *outcome) error {
	ct := k.make(c)
	if err := ct.setup(ctx, srv, c.writers); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer ct.teardown(ctx)
	rec := newRecorder(c.w1Events)
	if !k.noConsum {
		if err := ct.start(ctx, rec); err != nil {
			return fmt.Errorf("start: %w", err)
		}
	}
	stopped := false
	stop := func() error {
		if stopped || k.noConsum {
			return nil
		}
		stopped = true
		return ct.stop(ctx)
	}
	defer func() { _ = stop() }()
	stopProf, err := startProfile(c.cpuProf, srv.name, k.name, out.Round)
	if err != nil {
		return err
	}
	defer stopProf()
	mark := srv.markCPU(ctx, srv.admin)
	begin := time.Now()
	if err := writeAll(ctx, c.w1Events, c.writers, func(i int) error { return ct.write(ctx, i, rec) }); err != nil {
		return err
	}
	end := time.Now()
	out.Ran = true
	if k.noConsum {
		out.W1GoUs, out.W1DBUs, out.W1Allocs = perEvent(mark, srv.markCPU(ctx, srv.admin), int64(c.w1Events))
		out.W1PerSec = float64(c.w1Events) / end.Sub(begin).Seconds()
		return nil
	}
	if !rec.wait(ctx, c.timeout) {
		out.W1Missing = c.w1Events - int(rec.delivered.Load())
		out.W1Error = fmt.Sprintf("stalled, %d missing after %s", out.W1Missing, c.timeout)
		end = rec.lastDelivery()
	} else {
		// The CPU of the deliveries, not of the idle grace period.
		out.W1GoUs, out.W1DBUs, out.W1Allocs = perEvent(mark, srv.markCPU(ctx, srv.admin), rec.delivered.Load())
		stopProf()
		end = rec.lastDelivery()
		graceWait(ctx, c.grace)
	}
	out.W1PerSec = float64(rec.delivered.Load()) / end.Sub(begin).Seconds()
	lat := rec.latencies()
	out.P50Ms, out.P99Ms = ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99))
	out.Duplicates += rec.extra.Load() + rec.unknown.Load()
	return stop()
}

// runW2 runs W2 for one contender: c.w2Events events written as a backlog,
// then its consumers start; the rate runs from the start to the last
// first-delivery.
func runW2(ctx context.Context, c *config, srv *server, k *kind, out *outcome) error {
	ct := k.make(c)
	if err := ct.setup(ctx, srv, c.writers); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	defer ct.teardown(ctx)
	if err := ct.fill(ctx, c.w2Events); err != nil {
		return fmt.Errorf("fill: %w", err)
	}
	rec := newRecorder(c.w2Events)
	begin := time.Now()
	rec.start = begin
	if err := ct.start(ctx, rec); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	defer func() { _ = ct.stop(ctx) }()
	out.RanW2 = true
	if !rec.wait(ctx, c.timeout) {
		out.W2Missing = c.w2Events - int(rec.delivered.Load())
		out.W2Error = fmt.Sprintf("stalled, %d missing after %s", out.W2Missing, c.timeout)
	} else {
		graceWait(ctx, c.grace)
	}
	out.W2PerSec = float64(rec.delivered.Load()) / rec.lastDelivery().Sub(begin).Seconds()
	out.Duplicates += rec.extra.Load() + rec.unknown.Load()
	return ct.stop(ctx)
}

// graceWait leaves the consumers running for d after the last event
// arrived, so that a late second delivery is counted as a duplicate.
func graceWait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
