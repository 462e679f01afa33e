package main

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store"
)

// claimCounter counts the claims of the store it wraps. Through Unwrap the
// dispatcher and the poller still find every capability of the store (DONE
// batches, the wake source), as they would without it.
type claimCounter struct {
	store.SchemaManager
	claims *atomic.Int64
}

func (s claimCounter) Unwrap() core.Store { return s.SchemaManager }

func (s claimCounter) Claim(ctx context.Context, db core.DBTX, p core.ClaimParams) ([]core.Event, []core.RowError, error) {
	s.claims.Add(1)
	return s.SchemaManager.Claim(ctx, db, p)
}

// w4Variant is who writes in a W4 run.
type w4Variant struct {
	name string
	// writerOnly: the writer is a process of its own with a Writer and
	// no dispatcher (outbox.WriterOnly); two instances deliver. Otherwise
	// three instances run and the first one also writes, through WriteTx
	// on a plain *sql.Tx, which skips its hot path.
	writerOnly bool
}

var w4Variants = []w4Variant{
	{name: "WriteTx on a plain *sql.Tx"},
	{name: "WriterOnly process", writerOnly: true},
}

// runW4 measures cross-instance wake-up: events that no hot path delivers,
// written at -w4-rate events/s, each in a transaction of its own, reach a
// listener in another instance. It reports the commit-to-listener latency,
// duplicates, the writers' transaction time and, once everything is
// delivered and the pollers are idle again, the claims per second the
// instances still send to the database.
func runW4(ctx context.Context, c *config, tg *target) ([]result, error) {
	fmt.Printf("\n[%s] W4 cross-instance wake-up: %d events at %d/s, 3 processes\n", tg.name, c.w4Events, c.w4Rate)
	var rs []result
	for _, v := range w4Variants {
		fmt.Printf("    %s ...\n", v.name)
		r, err := w4Run(ctx, c, tg, v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		r.DB, r.Workload, r.Run = tg.name, "W4", v.name
		rs = append(rs, r)
	}
	printW4(tg, c, rs)
	return rs, nil
}

func w4Run(ctx context.Context, c *config, tg *target, v w4Variant) (result, error) {
	admin, err := tg.open(2)
	if err != nil {
		return result{}, err
	}
	defer admin.Close()
	t, err := newTable(ctx, tg, admin, "w4")
	if err != nil {
		return result{}, err
	}
	defer t.drop(ctx)

	data := newW1Data(c.w4Events + 1) // event 0 is the first after a quiet spell
	rec := newRecorder(data.ids)
	rec.reset()
	var claims atomic.Int64
	st := claimCounter{SchemaManager: t.st, claims: &claims}
	var (
		ins   []*instance
		pools []*sql.DB
	)
	defer func() {
		for _, in := range ins {
			_ = in.close(ctx)
		}
		for _, db := range pools {
			_ = db.Close()
		}
	}()
	open := func() (*sql.DB, error) {
		db, err := tg.open(c.w4Writers + c.workers + 4)
		if err == nil {
			pools = append(pools, db)
		}
		return db, err
	}
	var writer *core.Writer
	var writerDB *sql.DB
	if v.writerOnly {
		if writerDB, err = open(); err != nil {
			return result{}, err
		}
		if writer, err = core.NewWriter(core.WriterConfig{Store: st, NoNotify: c.noWake}); err != nil {
			return result{}, err
		}
	}
	for range 3 - len(pools) {
		db, err := open()
		if err != nil {
			return result{}, err
		}
		in, err := startInstance(ctx, c, st, db, rec)
		if err != nil {
			return result{}, err
		}
		ins = append(ins, in)
	}
	if !v.writerOnly {
		writer, writerDB = ins[0].w, ins[0].db
	}

	// Event 0 is written alone first and waited for: its latency is that
	// of the first event after a quiet spell, which on a database without
	// NOTIFY waits for the next poll. The flow that follows measures the
	// steady state.
	// Every instance polls once at Start: wait for those polls, so that
	// none of them is what finds event 0.
	if err := waitFor(ctx, c.timeout, func() bool { return claims.Load() >= int64(len(ins)) }); err != nil {
		return result{}, fmt.Errorf("first polls: %w", err)
	}
	if err := w4Write(ctx, writerDB, writer, data, 0); err != nil {
		return result{}, err
	}
	rec.commit(0)
	if err := waitFor(ctx, c.timeout, func() bool { return rec.delivered.Load() >= 1 }); err != nil {
		return result{}, fmt.Errorf("first event: %w", err)
	}

	// Each event i >= 1 is due at start + (i-1)/rate; writers take the next
	// event, wait for its time and write it in a transaction of its own.
	var next atomic.Int64
	next.Store(1)
	var (
		txMu     sync.Mutex
		txTimes  = make([]time.Duration, 0, c.w4Events)
		period   = time.Second / time.Duration(c.w4Rate)
		start    = time.Now()
		cpuStart = cpuTime()
		writeErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	for range c.w4Writers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i > c.w4Events || ctx.Err() != nil {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(i-1) * period))) // pacing, not synchronisation
				t0 := time.Now()
				if err := w4Write(ctx, writerDB, writer, data, i); err != nil {
					errOnce.Do(func() { writeErr = err })
					return
				}
				rec.commit(i)
				txMu.Lock()
				txTimes = append(txTimes, time.Since(t0))
				txMu.Unlock()
			}
		})
	}
	wg.Wait()
	if writeErr != nil {
		return result{}, writeErr
	}
	wrote := time.Since(start)
	doneAt, err := t.waitDone(ctx, rec, c.timeout)
	if err != nil {
		return result{}, err
	}
	cpu := cpuTime() - cpuStart
	first, lat := rec.latencyOf(0), rec.latenciesFrom(1)
	slices.Sort(txTimes)
	r := result{
		Events: c.w4Events, Seconds: doneAt.Sub(start).Seconds(), PerSec: float64(c.w4Events) / wrote.Seconds(),
		P50Ms: ms(percentile(lat, 0.5)), P99Ms: ms(percentile(lat, 0.99)), MaxMs: ms(percentile(lat, 1)),
		Duplicates: rec.duplicates(), CPUSeconds: cpu.Seconds(),
		TxP50Ms: ms(percentile(txTimes, 0.5)), FirstMs: ms(first),
	}
	for _, in := range ins {
		r.StoreErrors += in.m.storeErrors.Load()
	}
	if c.w4Idle > 0 {
		// Past the adaptive poll's busy period, count the claims of a
		// quiet outbox.
		if err := sleepCtx(ctx, c.w4Settle); err != nil {
			return result{}, err
		}
		n0 := claims.Load()
		if err := sleepCtx(ctx, c.w4Idle); err != nil {
			return result{}, err
		}
		r.IdleClaimsPerSec = float64(claims.Load()-n0) / c.w4Idle.Seconds()
	}
	return r, nil
}

// waitFor waits until cond holds, checking every millisecond.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// sleepCtx waits for d, or returns ctx's error if ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// w4Write writes event i through WriteTx on a plain *sql.Tx: no after-commit
// hook, so no hot path; only a poller delivers it.
func w4Write(ctx context.Context, db *sql.DB, w *core.Writer, data *w1Data, i int) error {
	env, err := core.NewEnvelope(core.EnvelopeSpec{ID: data.ids[i], Type: orderPlaced, AggregateType: orderAgg,
		AggregateID: fmt.Sprintf("o-%09d", i), JSON: data.payloads[i]})
	if err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := w.WriteTx(ctx, tx, env); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

func printW4(tg *target, c *config, rs []result) {
	wake := "NOTIFY/LISTEN where the store has it, adaptive poll"
	if c.noWake {
		wake = "no NOTIFY/LISTEN (-no-wake), adaptive poll"
	}
	fmt.Printf("\nW4 cross-instance wake-up, %s: %d events at %d/s, one transaction each, poll interval %s, busy interval %s; %s\n",
		tg.name, c.w4Events, c.w4Rate, c.pollInterval, c.busyInterval, wake)
	fmt.Printf("| %-28s | %9s | %8s | %7s | %7s | %7s | %4s | %9s | %13s | %10s |\n", "writer", "events/s", "first ms", "p50 ms", "p99 ms", "max ms", "dups", "tx p50 ms", "idle claims/s", "store errs")
	fmt.Printf("|%s|%s|%s|%s|%s|%s|%s|%s|%s|%s|\n", dashes(30), dashes(11), dashes(10), dashes(9), dashes(9), dashes(9), dashes(6), dashes(11), dashes(15), dashes(12))
	for _, r := range rs {
		fmt.Printf("| %-28s | %9s | %8.1f | %7.2f | %7.2f | %7.1f | %4d | %9.2f | %13.2f | %10d |\n", r.Run, thousands(r.PerSec),
			r.FirstMs, r.P50Ms, r.P99Ms, r.MaxMs, r.Duplicates, r.TxP50Ms, r.IdleClaimsPerSec, r.StoreErrors)
	}
	fmt.Println("  first: one event written alone after a quiet spell; p50/p99/max: the paced flow after it. Latency: the writer's")
	fmt.Println("  commit returned to the first listener call, in any instance (the WriterOnly process has none);")
	fmt.Println("  tx p50: the writer's BEGIN, INSERT (and NOTIFY), COMMIT; idle claims/s: all instances, after the busy period.")
}
