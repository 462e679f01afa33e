package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
)

// copyColumns are the stored columns of every dialect (MySQL's generated
// lane column is computed).
const copyColumns = "event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, status, " +
	"attempts, available_at, created_at, done_at, last_error, locked_by, locked_at"

// fillBacklog inserts n pending events numberedID(0..n-1), created one
// microsecond apart two hours ago.
func fillBacklog(ctx context.Context, t *table, n int) error {
	start := time.Now().Add(-2 * time.Hour)
	const chunk = 1000
	envs := make([]core.Envelope, 0, chunk)
	began := time.Now()
	for i := range n {
		env, err := core.NewEnvelope(core.EnvelopeSpec{ID: numberedID(i), Type: orderPlaced, AggregateType: orderAgg,
			AggregateID: fmt.Sprintf("o-%09d", i), OccurredAt: start.Add(time.Duration(i) * time.Microsecond), JSON: payload(i)})
		if err != nil {
			return err
		}
		envs = append(envs, env)
		if len(envs) == chunk || i == n-1 {
			if err := t.st.Insert(ctx, t.db, envs, core.InsertOptions{}); err != nil {
				return fmt.Errorf("fill backlog: %w", err)
			}
			envs = envs[:0]
		}
	}
	fmt.Printf("    backlog of %d rows inserted in %.1f s\n", n, time.Since(began).Seconds())
	return nil
}

// copyBacklog returns a fresh table holding the rows of tmpl, with fresh
// planner statistics, and with -fillfactor applied first on PostgreSQL.
func copyBacklog(ctx context.Context, c *config, tmpl *table, kind string) (*table, error) {
	t, err := newTable(ctx, tmpl.tg, tmpl.db, kind)
	if err != nil {
		return nil, err
	}
	if c.fillfactor > 0 && tmpl.tg.name == "postgres" {
		q := fmt.Sprintf("ALTER TABLE %s SET (fillfactor = %d)", t.st.Table(), c.fillfactor)
		if _, err := tmpl.db.ExecContext(ctx, q); err != nil {
			t.drop(ctx)
			return nil, err
		}
	}
	if err := noAutovacuum(ctx, c, t); err != nil {
		t.drop(ctx)
		return nil, err
	}
	q := "INSERT INTO " + t.st.Table() + " (" + copyColumns + ") SELECT " + copyColumns + " FROM " + tmpl.st.Table()
	if _, err := tmpl.db.ExecContext(ctx, q); err != nil {
		t.drop(ctx)
		return nil, fmt.Errorf("copy backlog: %w", err)
	}
	if err := analyze(ctx, t); err != nil {
		t.drop(ctx)
		return nil, err
	}
	return t, nil
}

// noAutovacuum turns autovacuum off for t on PostgreSQL with
// -no-autovacuum: per table, as the server is shared.
func noAutovacuum(ctx context.Context, c *config, t *table) error {
	if !c.noAutovacuum || t.tg.name != "postgres" {
		return nil
	}
	_, err := t.db.ExecContext(ctx, fmt.Sprintf("ALTER TABLE %s SET (autovacuum_enabled = false)", t.st.Table()))
	return err
}

// analyze refreshes the planner statistics of t.
func analyze(ctx context.Context, t *table) error {
	if t.tg.analyze == "" {
		return nil
	}
	if _, err := t.db.ExecContext(ctx, fmt.Sprintf(t.tg.analyze, t.st.Table())); err != nil {
		return fmt.Errorf("analyze: %w", err)
	}
	return nil
}

// w2Baseline drains the backlog with one raw loop: claim c.rawBatch rows with
// the store's claim statement, mark them DONE in one UPDATE, repeat.
func w2Baseline(ctx context.Context, c *config, tmpl *table, n int) (result, error) {
	t, err := copyBacklog(ctx, c, tmpl, "w2raw")
	if err != nil {
		return result{}, err
	}
	defer t.drop(ctx)
	tg := t.tg
	db, err := tg.open(2)
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	const owner = "bench-raw"
	var done atomic.Int64
	stopVacuum := startVacuum(ctx, c, t)
	defer stopVacuum()
	s := startSampler(tg.name+" raw claim+mark", c.every, done.Load)
	start, cpu0 := time.Now(), tg.cpu()
	for {
		if err := ctx.Err(); err != nil {
			s.finish()
			return result{}, err
		}
		if time.Since(start) > c.timeout {
			s.finish()
			return result{}, fmt.Errorf("timed out after %s: %d of %d rows done", c.timeout, done.Load(), n)
		}
		evs, bad, err := t.st.Claim(ctx, db, core.ClaimParams{Owner: owner, Now: time.Now(), LeaseTimeout: time.Hour, Limit: c.rawBatch})
		if err != nil {
			s.finish()
			return result{}, err
		}
		if len(evs)+len(bad) == 0 {
			break
		}
		var q strings.Builder
		q.WriteString("UPDATE " + t.st.Table() + " SET status = 1, done_at = ?, locked_by = NULL, locked_at = NULL WHERE locked_by = ? AND event_id IN (")
		args := []any{tg.encodeTime(time.Now()), owner}
		for i, ev := range evs {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteByte('?')
			args = append(args, ev.ID())
		}
		q.WriteByte(')')
		res, err := db.ExecContext(ctx, tg.rebind(q.String()), args...)
		if err != nil {
			s.finish()
			return result{}, fmt.Errorf("mark done: %w", err)
		}
		k, _ := res.RowsAffected()
		done.Add(k)
	}
	elapsed := time.Since(start)
	rates := s.finish()
	if got := done.Load(); got != int64(n) {
		return result{}, fmt.Errorf("raw loop marked %d rows DONE, want %d", got, n)
	}
	self, server := tg.since(cpu0)
	return result{Events: n, Seconds: elapsed.Seconds(), CPUSeconds: self, ServerCPUSeconds: server,
		PerSec: float64(n) / elapsed.Seconds(), Rates: rates, EndStart: endStart(rates)}, nil
}

// w2Outbox drains the backlog with instances dispatcher+poller instances,
// on pgx with onPgx (see openInstance). With -no-raw it drains tmpl itself:
// the long drain makes no copy.
func w2Outbox(ctx context.Context, c *config, tmpl *table, rec *recorder, instances int, onPgx bool, cs *callStats) (result, error) {
	return w2Drain(ctx, c, tmpl, rec, instances, onPgx, false, cs)
}

// w2Drain is w2Outbox, in position delivery with pos: the backlog is
// STREAM rows, drained by the position reader.
func w2Drain(ctx context.Context, c *config, tmpl *table, rec *recorder, instances int, onPgx, pos bool, cs *callStats) (result, error) {
	t := tmpl
	if pos {
		var err error
		if t, err = copyStream(ctx, c, tmpl, "w2pos"); err != nil {
			return result{}, err
		}
		defer t.drop(ctx)
	} else if !c.noRaw {
		var err error
		if t, err = copyBacklog(ctx, c, tmpl, "w2"); err != nil {
			return result{}, err
		}
		defer t.drop(ctx)
	}
	rec.reset()
	resetPeakRSS()
	rssBefore := peakRSS()
	var ins []*instance
	defer func() {
		for _, in := range ins {
			_ = in.close(ctx)
			in.release()
		}
	}()
	label := fmt.Sprintf("%s outbox x%d", t.tg.name, instances)
	st := newTimedStore(t.st, cs, nil)
	if pos {
		st = positional{st}
	}
	start, cpu0 := time.Now(), t.tg.cpu()
	var l core.Listener = rec
	if c.listenerDelay > 0 {
		l = slowListener{rec, c.listenerDelay}
	}
	for range instances {
		in, err := openInstance(ctx, c, t.tg, st, c.poolSize(instances), l, onPgx)
		if err != nil {
			return result{}, err
		}
		ins = append(ins, in)
	}
	stopVacuum := startVacuum(ctx, c, t)
	defer stopVacuum()
	s := startSampler(label, c.every, rec.delivered.Load)
	doneAt, err := t.waitDone(ctx, rec, c.timeout)
	rates := s.finish()
	if err != nil {
		return result{}, err
	}
	elapsed := doneAt.Sub(start)
	cpu, serverCPU := t.tg.since(cpu0)
	peak := peakRSS()
	var storeErrors int64
	for _, in := range ins {
		storeErrors += in.m.storeErrors.Load()
	}
	run := "outbox, 1 instance"
	if onPgx {
		run = "outbox on pgx, 1 instance"
	}
	if instances > 1 {
		run = fmt.Sprintf("outbox, %d instances (W3)", instances)
	}
	if pos {
		run = "outbox position, 1 instance"
	}
	n := rec.n
	return result{Run: run, Events: n, Seconds: elapsed.Seconds(), PerSec: float64(n) / elapsed.Seconds(),
		Duplicates: rec.duplicates(), Rates: rates, EndStart: endStart(rates), StoreErrors: storeErrors, StoreStats: cs.String(), CPUSeconds: cpu, ServerCPUSeconds: serverCPU,
		PeakRSSMiB: float64(peak) / (1 << 20), RSSGrowthMiB: float64(peak-rssBefore) / (1 << 20)}, nil
}

// listenerNote says how the listener of W2 and W3 behaves, when not at
// once.
func listenerNote(c *config) string {
	if c.listenerDelay <= 0 {
		return ""
	}
	return fmt.Sprintf("; each listener call waits %s (-listener-delay), %d workers per instance", c.listenerDelay, c.workers)
}

// slowListener waits d before recording each event, as a listener that
// calls a remote service would: the drain is then bound by the workers'
// waiting, not by CPU.
type slowListener struct {
	rec *recorder
	d   time.Duration
}

func (l slowListener) Handle(ctx context.Context, ev core.Event) error {
	t := time.NewTimer(l.d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	return l.rec.Handle(ctx, ev)
}

// runW2 fills one backlog, then drains copies of it with the raw baseline,
// one instance, (with w3) two instances, and the raw baseline again: the
// ratios are to the mean of the two baseline runs, which bracket the others
// so that a change in the machine's load shows up in both. It prints their
// table.
func runW2(ctx context.Context, c *config, tg *target, w2, w3 bool) ([]result, error) {
	fmt.Printf("\n[%s] W2 backlog: %d pending rows%s\n", tg.name, c.w2Events, listenerNote(c))
	admin, err := tg.open(4)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	tmpl, err := newTable(ctx, tg, admin, "tmpl")
	if err != nil {
		return nil, err
	}
	defer tmpl.drop(ctx)
	if c.noRaw {
		if err := noAutovacuum(ctx, c, tmpl); err != nil {
			return nil, err
		}
	}
	if err := fillBacklog(ctx, tmpl, c.w2Events); err != nil {
		return nil, err
	}
	if c.noRaw {
		if err := analyze(ctx, tmpl); err != nil {
			return nil, err
		}
	}
	n := c.w2Events
	rec := newNumberedRecorder(n)
	var rs []result
	step := func(name string, f func() (result, error)) error {
		fmt.Printf("    %s ...\n", name)
		r, err := f()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if r.Run == "" {
			r.Run = name
		}
		r.DB, r.Workload = tg.name, "W2"
		rs = append(rs, r)
		return nil
	}
	raw := func() (result, error) { return w2Baseline(ctx, c, tmpl, n) }
	if c.noRaw {
		// The long drain: only the outbox runs, each with its end/start.
		if err := step("outbox, 1 instance", func() (result, error) { return w2Outbox(ctx, c, tmpl, rec, 1, false, &callStats{}) }); err != nil {
			return nil, err
		}
		printW2(tg, c, rs)
		return rs, nil
	}
	if err := step("raw claim+mark (before)", raw); err != nil {
		return nil, err
	}
	if w2 || w3 {
		if err := step("outbox, 1 instance", func() (result, error) { return w2Outbox(ctx, c, tmpl, rec, 1, false, &callStats{}) }); err != nil {
			return nil, err
		}
		if c.position && tg.hasPosition() {
			if err := step("outbox position, 1 instance", func() (result, error) { return w2Drain(ctx, c, tmpl, rec, 1, false, true, &callStats{}) }); err != nil {
				return nil, err
			}
		}
		if tg.openPgx != nil && c.pgx {
			if err := step("outbox on pgx, 1 instance", func() (result, error) { return w2Outbox(ctx, c, tmpl, rec, 1, true, &callStats{}) }); err != nil {
				return nil, err
			}
		}
	}
	if w3 {
		if err := step("outbox, 2 instances (W3)", func() (result, error) { return w2Outbox(ctx, c, tmpl, rec, 2, false, &callStats{}) }); err != nil {
			return nil, err
		}
	}
	if err := step("raw claim+mark (after)", raw); err != nil {
		return nil, err
	}
	before, after := rs[0], rs[len(rs)-1]
	before.Run = fmt.Sprintf("raw claim%d+UPDATE (before)", c.rawBatch)
	after.Run = fmt.Sprintf("raw claim%d+UPDATE (after)", c.rawBatch)
	base := (before.PerSec + after.PerSec) / 2
	rs = append([]result{before, after}, rs[1:len(rs)-1]...)
	for i := range rs {
		rs[i].Baseline = fmt.Sprintf("mean of the raw claim %d + UPDATE runs", c.rawBatch)
		rs[i].Ratio = rs[i].PerSec / base
	}
	printW2(tg, c, rs)
	return rs, nil
}

// startVacuum runs VACUUM on t every -vacuum-every on PostgreSQL, as an
// aggressive autovacuum would, until the returned function is called.
func startVacuum(ctx context.Context, c *config, t *table) (stop func()) {
	if c.vacuumEvery <= 0 || t.tg.name != "postgres" {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() { // owned: stop waits on done
		defer close(done)
		tick := time.NewTicker(c.vacuumEvery)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				if _, err := t.db.ExecContext(ctx, "VACUUM "+t.st.Table()); err != nil && ctx.Err() == nil {
					fmt.Printf("    vacuum %s: %v\n", t.st.Table(), err)
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}
