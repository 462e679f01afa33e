package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
)

// The soak (-w soak, make soak): -soak-events events through W1 (writers
// committing business transactions while one instance delivers them), then
// through W2 (a backlog of as many, drained by one instance), with a line
// every -soak-every: rates, backlog, the process's resident memory, and the
// latencies of the claims, the DONE batches and (W1) the deliveries in that
// window. A library that leaks or whose claims decay shows it as a drift
// from the first window to the last; the summary puts the two side by side.

// soakWindow is what one reporting window saw.
type soakWindow struct {
	At          time.Duration `json:"-"`
	AtSeconds   float64       `json:"at_seconds"`
	WrittenPS   float64       `json:"written_per_sec"`
	DeliverPS   float64       `json:"delivered_per_sec"`
	Backlog     int64         `json:"backlog"`
	RSSMiB      float64       `json:"rss_mib"`
	Claims      int           `json:"claims"`
	ClaimP50Ms  float64       `json:"claim_p50_ms"`
	ClaimP99Ms  float64       `json:"claim_p99_ms"`
	DoneBatches int           `json:"done_batches"`
	DoneP99Ms   float64       `json:"done_p99_ms"`
	LatP50Ms    float64       `json:"delivery_p50_ms,omitempty"`
	LatP99Ms    float64       `json:"delivery_p99_ms,omitempty"`
}

// latencyWindow collects delivery latencies until take empties it.
type latencyWindow struct {
	mu   sync.Mutex
	durs []time.Duration
}

func (w *latencyWindow) add(d time.Duration) {
	w.mu.Lock()
	w.durs = append(w.durs, d)
	w.mu.Unlock()
}

func (w *latencyWindow) take() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.durs
	w.durs = make([]time.Duration, 0, len(out))
	return out
}

// soakListener delivers to the recorder and times each event from its
// OccurredAt (set just before its transaction began).
type soakListener struct {
	rec *recorder
	lat *latencyWindow // nil: no latencies (W2: the events are old)
}

func (l soakListener) Handle(ctx context.Context, ev core.Event) error {
	if l.lat != nil {
		l.lat.add(time.Since(ev.OccurredAt()))
	}
	return l.rec.Handle(ctx, ev)
}

// soakReporter prints a soakWindow every interval until stopped.
type soakReporter struct {
	label              string
	every              time.Duration
	written, delivered func() int64
	cs                 *callStats
	lat                *latencyWindow
	stop, done         chan struct{}
	windows            []soakWindow
}

func startSoakReporter(label string, every time.Duration, written, delivered func() int64, cs *callStats, lat *latencyWindow) *soakReporter {
	r := &soakReporter{label: label, every: every, written: written, delivered: delivered, cs: cs, lat: lat,
		stop: make(chan struct{}), done: make(chan struct{})}
	fmt.Printf("    %-8s %10s %11s %9s %8s %22s %18s %18s\n", "at", "written/s", "delivered/s", "backlog", "RSS MiB",
		"claims n, p50/p99 ms", "DONE batches, p99", "delivery p50/p99")
	go r.loop() // owned: finish waits on done
	return r
}

func (r *soakReporter) loop() {
	defer close(r.done)
	t := time.NewTicker(r.every)
	defer t.Stop()
	start := time.Now()
	lastW, lastD, lastAt := r.written(), r.delivered(), start
	for {
		select {
		case <-r.stop:
			return
		case now := <-t.C:
			w, d := r.written(), r.delivered()
			secs := now.Sub(lastAt).Seconds()
			at := now.Sub(start).Round(time.Second)
			win := soakWindow{At: at, AtSeconds: at.Seconds(), WrittenPS: float64(w-lastW) / secs,
				DeliverPS: float64(d-lastD) / secs, Backlog: max(w-d, 0), RSSMiB: float64(currentRSS()) / (1 << 20)}
			claims, done := r.cs.claims.take(), r.cs.done.take()
			r.cs.inserts.take() // not shown: dropped so that they do not pile up
			r.cs.marks.take()
			win.Claims, win.DoneBatches = len(claims), len(done)
			win.ClaimP50Ms, win.ClaimP99Ms = ms(percentile(claims, 0.5)), ms(percentile(claims, 0.99))
			win.DoneP99Ms = ms(percentile(done, 0.99))
			latCol := "-"
			if r.lat != nil {
				lat := r.lat.take()
				slices.Sort(lat)
				win.LatP50Ms, win.LatP99Ms = ms(percentile(lat, 0.5)), ms(percentile(lat, 0.99))
				latCol = fmt.Sprintf("%.2f / %.1f", win.LatP50Ms, win.LatP99Ms)
			}
			r.windows = append(r.windows, win)
			fmt.Printf("    %-8s %10.0f %11.0f %9d %8.1f %22s %18s %18s\n", win.At, win.WrittenPS, win.DeliverPS, win.Backlog,
				win.RSSMiB, fmt.Sprintf("%d, %.2f / %.2f", win.Claims, win.ClaimP50Ms, win.ClaimP99Ms),
				fmt.Sprintf("%d, %.2f", win.DoneBatches, win.DoneP99Ms), latCol)
			lastW, lastD, lastAt = w, d, now
		}
	}
}

func (r *soakReporter) finish() []soakWindow {
	close(r.stop)
	<-r.done
	return r.windows
}

// soakSummary compares the first full window with the last one that was
// full of work (the final partial window and a drained tail are left out).
func soakSummary(label string, ws []soakWindow, rate func(soakWindow) float64) string {
	var full []soakWindow
	for _, w := range ws {
		if rate(w) > 0 {
			full = append(full, w)
		}
	}
	if len(full) < 3 {
		return fmt.Sprintf("%s: %d windows with work, too few to compare first and last (lengthen the run or shorten -soak-every)", label, len(full))
	}
	// The last window with work may be the partial tail of the run.
	first, last := full[0], full[len(full)-2]
	return fmt.Sprintf("%s: window %s vs %s: rate %.0f -> %.0f/s (%.2fx), RSS %.1f -> %.1f MiB (%+.1f), claim p99 %.2f -> %.2f ms, DONE batch p99 %.2f -> %.2f ms",
		label, first.At, last.At, rate(first), rate(last), rate(last)/rate(first), first.RSSMiB, last.RSSMiB, last.RSSMiB-first.RSSMiB,
		first.ClaimP99Ms, last.ClaimP99Ms, first.DoneP99Ms, last.DoneP99Ms)
}

// runSoak runs the W1 soak, then the W2 soak, on tg.
func runSoak(ctx context.Context, c *config, tg *target) ([]result, error) {
	n := c.soakEvents
	var rs []result
	fmt.Printf("\n[%s] soak W1: %d events, %d per transaction, %d writers, one instance, a line every %s\n", tg.name, n, c.soakPerTx, c.writers, c.soakEvery)
	r1, ws1, err := soakW1(ctx, c, tg, n)
	if err != nil {
		return nil, fmt.Errorf("soak W1: %w", err)
	}
	fmt.Printf("    %s; duplicates %d\n", soakSummary("W1 delivered", ws1, func(w soakWindow) float64 { return w.DeliverPS }), r1.Duplicates)
	rs = append(rs, r1)

	fmt.Printf("\n[%s] soak W2: a backlog of %d events, drained by one instance, a line every %s\n", tg.name, n, c.soakEvery)
	r2, ws2, err := soakW2(ctx, c, tg, n)
	if err != nil {
		return nil, fmt.Errorf("soak W2: %w", err)
	}
	fmt.Printf("    %s; duplicates %d\n", soakSummary("W2 drained", ws2, func(w soakWindow) float64 { return w.DeliverPS }), r2.Duplicates)
	rs = append(rs, r2)
	return rs, nil
}

func soakW1(ctx context.Context, c *config, tg *target, n int) (result, []soakWindow, error) {
	admin, err := tg.open(2)
	if err != nil {
		return result{}, nil, err
	}
	defer admin.Close()
	biz, dropBiz, err := bizTable(ctx, tg, admin)
	if err != nil {
		return result{}, nil, err
	}
	defer dropBiz()
	t, err := newTable(ctx, tg, admin, "soak1")
	if err != nil {
		return result{}, nil, err
	}
	defer t.drop(ctx)
	bizInsert := tg.rebind("INSERT INTO " + biz + " (id, customer, amount, created_at) VALUES (?, ?, ?, ?)")
	rec := newNumberedRecorder(n)
	rec.reset()
	lat := &latencyWindow{}
	cs := new(callStats).windowed()
	in, err := openInstance(ctx, c, tg, newTimedStore(t.st, cs, nil), c.poolSize(1), soakListener{rec: rec, lat: lat}, false)
	if err != nil {
		return result{}, nil, err
	}
	defer func() {
		_ = in.close(ctx)
		in.release()
	}()
	var written atomic.Int64
	rep := startSoakReporter("W1", c.soakEvery, written.Load, rec.delivered.Load, cs, lat)
	start, cpu0 := time.Now(), cpuTime()
	per := c.soakPerTx
	_, err = writeAll(ctx, (n+per-1)/per, c.writers, func(_, j int) error {
		first := j * per
		envs := make([]core.Envelope, 0, per)
		for i := first; i < min(first+per, n); i++ {
			env, err := core.NewEnvelope(core.EnvelopeSpec{ID: numberedID(i), Type: orderPlaced, AggregateType: orderAgg,
				AggregateID: fmt.Sprintf("o-%09d", i), JSON: payload(i)})
			if err != nil {
				return err
			}
			envs = append(envs, env)
		}
		err := in.placeOrder(ctx, tg, bizInsert, first, envs, nil)
		if err == nil {
			written.Add(int64(len(envs)))
		}
		return err
	})
	if err != nil {
		rep.finish()
		return result{}, nil, err
	}
	doneAt, err := t.waitDone(ctx, rec, c.timeout)
	ws := rep.finish()
	if err != nil {
		return result{}, nil, err
	}
	elapsed := doneAt.Sub(start)
	return result{Run: "soak W1, 1 instance", DB: tg.name, Workload: "soak W1", Events: n, Seconds: elapsed.Seconds(),
		PerSec: float64(n) / elapsed.Seconds(), Duplicates: rec.duplicates(), StoreStats: cs.String(),
		CPUSeconds: (cpuTime() - cpu0).Seconds(), Rates: deliveredRates(ws), Soak: ws}, ws, nil
}

func soakW2(ctx context.Context, c *config, tg *target, n int) (result, []soakWindow, error) {
	admin, err := tg.open(4)
	if err != nil {
		return result{}, nil, err
	}
	defer admin.Close()
	t, err := newTable(ctx, tg, admin, "soak2")
	if err != nil {
		return result{}, nil, err
	}
	defer t.drop(ctx)
	if err := fillBacklog(ctx, t, n); err != nil {
		return result{}, nil, err
	}
	if tg.analyze != "" {
		if _, err := admin.ExecContext(ctx, fmt.Sprintf(tg.analyze, t.st.Table())); err != nil {
			return result{}, nil, fmt.Errorf("analyze: %w", err)
		}
	}
	rec := newNumberedRecorder(n)
	rec.reset()
	cs := new(callStats).windowed()
	total := int64(n)
	rep := startSoakReporter("W2", c.soakEvery, func() int64 { return total }, rec.delivered.Load, cs, nil)
	start, cpu0 := time.Now(), cpuTime()
	in, err := openInstance(ctx, c, tg, newTimedStore(t.st, cs, nil), c.poolSize(1), soakListener{rec: rec}, false)
	if err != nil {
		rep.finish()
		return result{}, nil, err
	}
	defer func() {
		_ = in.close(ctx)
		in.release()
	}()
	doneAt, err := t.waitDone(ctx, rec, c.timeout)
	ws := rep.finish()
	if err != nil {
		return result{}, nil, err
	}
	elapsed := doneAt.Sub(start)
	return result{Run: "soak W2, 1 instance", DB: tg.name, Workload: "soak W2", Events: n, Seconds: elapsed.Seconds(),
		PerSec: float64(n) / elapsed.Seconds(), Duplicates: rec.duplicates(), StoreStats: cs.String(),
		CPUSeconds: (cpuTime() - cpu0).Seconds(), Rates: deliveredRates(ws), Soak: ws}, ws, nil
}

func deliveredRates(ws []soakWindow) []float64 {
	out := make([]float64, len(ws))
	for i, w := range ws {
		out[i] = w.DeliverPS
	}
	return out
}

// currentRSS returns the resident set size of this process in bytes
// (VmRSS), or 0 where /proc is missing.
func currentRSS() int64 { return procStatusBytes("VmRSS:") }
