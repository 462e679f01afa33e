package reliability

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/ordercheck"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/reliability/internal/chaos"
)

// orderedRun is one ordered crash scenario.
type orderedRun struct {
	crashRun
	events, keys int
	rate         float64 // events per second, all writers together
	fail         float64 // share of listener calls that fail
	poisonKeys   int     // keys "0".."poisonKeys-1" hold only poison events
}

// TestCrashOrdered: ordered delivery per key through SIGKILLs. Three worker
// processes deliver, and each also writes the same keys at once, without
// locking them, through its own hot path (so that a kill takes down open
// writing transactions and just-committed events queued in memory, as well
// as deliveries); one of them (and each of its replacements) has its clock
// 10 s behind (OccurredAt, hence created_at, off by -10 s, so that
// created_at order and commit order disagree); 5% of listener calls fail; a
// random worker is killed every ~2 s and restarted, writing too until the
// table holds the run's events. The order checker, fed with the deliveries
// the listeners recorded, must see no call of a key's event before its
// predecessor's successful call finished, and none going back; every event
// must be DONE and delivered.
func TestCrashOrdered(t *testing.T) {
	t.Parallel()
	forEachDialectDelivery(t, []string{"postgres", "mysql"}, func(t *testing.T, tg testdb.Target, dv delivery) {
		r := newOrderedRun(tg, dv)
		r.events, r.keys, r.rate, r.fail = cfg.orderedEvents, cfg.orderedKeys, cfg.orderedRate, 0.05
		runOrderedCrash(t, r)
	})
}

// TestCrashOrderedPoison: as TestCrashOrdered, with every event of a few keys
// poison (its listener always fails, so that the key's head goes DEAD after
// three attempts) and no other failures: those keys are blocked, their later
// events wait, BlockedKeys lists exactly them, and every other key is done.
func TestCrashOrderedPoison(t *testing.T) {
	t.Parallel()
	forEachDialectDelivery(t, []string{"postgres", "mysql"}, func(t *testing.T, tg testdb.Target, dv delivery) {
		r := newOrderedRun(tg, dv)
		r.events, r.keys, r.rate, r.poisonKeys = cfg.orderedEvents/2, cfg.orderedKeys, cfg.orderedRate, 5
		runOrderedCrash(t, r)
	})
}

// newOrderedRun returns an ordered crash run on tg in dv: in position
// delivery the workers are outbox.Outbox instances with SingleActive (one
// reads the position at a time), each writing through its own Writer.
func newOrderedRun(tg testdb.Target, dv delivery) *orderedRun {
	env := testdb.PostgresEnv
	if tg.Name == "mysql" {
		env = testdb.MySQLEnv
	}
	return &orderedRun{crashRun: crashRun{
		dialect: tg.Name, dsn: os.Getenv(env), db: tg.DB, outbox: tg.Table,
		workersPer: 4, lease: 5 * time.Second, work: 5 * time.Millisecond, coldQueue: 100,
		position: dv.position, delivery: dv.name,
	}}
}

func runOrderedCrash(t *testing.T, r *orderedRun) {
	ctx := context.Background()
	var err error
	r.deliveries, err = chaos.NewDeliveries(r.dialect, testdb.UniqueName("deliv"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.deliveries.Create(ctx, r.db); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		if err := r.deliveries.Drop(ctx, r.db); err != nil {
			t.Error(err)
		}
	})
	// In position delivery, order is commit order without a key table on
	// the happy path: writers of a key that do not serialise have no order
	// to keep (they are delivered in first-visibility order). There each
	// transaction locks its key's counter, which numbers its events, and
	// the order checked is that numbering.
	var counters chaos.Counters
	if r.position {
		if counters, err = chaos.NewCounters(r.dialect, testdb.UniqueName("counters")); err != nil {
			t.Fatal(err)
		}
		if err := counters.Create(ctx, r.db, r.keys); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := cleanupCtx()
			defer cancel()
			if err := counters.Drop(ctx, r.db); err != nil {
				t.Error(err)
			}
		})
	}
	maxAttempts := "1000"
	if r.poisonKeys > 0 {
		maxAttempts = "3"
	}
	const procs = 3
	// writing: the workers started now write too; slot 0's clock is 10 s
	// behind. wrote[i]: workers[i] was started writing.
	writing := true
	wrote := make([]bool, procs)
	startWorker := func(slot, n int) *proc {
		args := []string{"-role", "worker", "-ordered", "-dialect", r.dialect, "-dsn", r.dsn,
			"-table", r.outbox, "-deliveries", r.deliveries.Table(), "-workers", fmt.Sprint(r.workersPer),
			"-lease", r.lease.String(), "-interval", "100ms", "-cold", fmt.Sprint(r.coldQueue), "-work", r.work.String(),
			"-fail", fmt.Sprint(r.fail), "-max-attempts", maxAttempts, "-v"}
		args = append(args, r.flags()...)
		if writing {
			skew := "0s"
			if slot == 0 {
				skew = "-10s"
			}
			args = append(args, "-write", "-events", "0", "-rate", fmt.Sprint(r.rate/procs), "-concurrency", "4", "-per-tx", "2",
				"-keys", fmt.Sprint(r.keys), "-poison-keys", fmt.Sprint(r.poisonKeys), "-skew", skew)
			if r.position {
				args = append(args, "-counters", counters.Table())
			}
		}
		wrote[slot] = writing
		p := startProc(t, fmt.Sprintf("worker-%d", n), args...)
		p.owner = strings.TrimPrefix(p.line(t, "ready ", time.Minute), "ready ")
		return p
	}

	start := time.Now()
	workers := make([]*proc, procs)
	started := 0
	for i := range workers {
		workers[i] = startWorker(i, started)
		started++
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	jitter := func() time.Duration { return time.Duration(float64(cfg.crashKillEvery) * (0.5 + rng.Float64())) }
	timer := time.NewTimer(jitter())
	defer timer.Stop()
	// The supervisor samples the table's row count to tell the writers to
	// stop once r.events are written; a worker killed meanwhile takes its
	// writers' open transactions with it.
	sample := time.NewTicker(200 * time.Millisecond)
	defer sample.Stop()
	kills := 0
	for writing || kills < cfg.crashMinKills {
		select {
		case <-sample.C:
			if !writing {
				continue
			}
			var n int
			if err := r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+r.outbox).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n < r.events {
				continue
			}
			writing = false
			for i, w := range workers {
				if wrote[i] {
					if err := w.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
						t.Fatalf("%s: stop writing: %v", w.name, err)
					}
				}
			}
		case <-timer.C:
			i := rng.IntN(len(workers))
			workers[i].kill()
			<-workers[i].exited
			checkRaces(t, workers[i])
			kills++
			workers[i] = startWorker(i, started)
			started++
			timer.Reset(jitter())
		}
	}
	// The writers of the workers never killed report; those of killed ones
	// went with them.
	var retries, ambiguous int
	for i, w := range workers {
		if !wrote[i] {
			continue
		}
		l := w.line(t, "written=", time.Minute)
		var n, rt, amb int
		if _, err := fmt.Sscanf(l, "written=%d retries=%d ambiguous=%d", &n, &rt, &amb); err != nil {
			t.Fatalf("%s output %q: %v", w.name, l, err)
		}
		retries, ambiguous = retries+rt, ambiguous+amb
	}
	writeTime := time.Since(start)
	var events int
	if err := r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+r.outbox).Scan(&events); err != nil {
		t.Fatal(err)
	}

	// Poison keys: every event of them is in the table; their heads go DEAD
	// and the rest wait.
	var poisonKeys []string
	for k := range r.poisonKeys {
		poisonKeys = append(poisonKeys, strconv.Itoa(k))
	}
	poisonEvents, poisonUsed := 0, 0
	if len(poisonKeys) > 0 {
		q := "SELECT COUNT(*), COUNT(DISTINCT aggregate_id) FROM " + r.outbox + " WHERE aggregate_id IN ('" +
			strings.Join(poisonKeys, "', '") + "')"
		if err := r.db.QueryRowContext(ctx, q).Scan(&poisonEvents, &poisonUsed); err != nil {
			t.Fatal(err)
		}
	}
	// Delivered: DONE in the claim path; in position delivery a delivered
	// row stays STREAM, or is DONE if it failed once (its key then moved
	// into the claim path), so there the deliveries table tells.
	finished := func(c map[core.Status]int) int { return c[core.StatusDone] + c[core.StatusStream] }
	waitUntil(t, 5*time.Minute, 200*time.Millisecond, fmt.Sprintf("%d delivered, %d DEAD", events-poisonEvents, poisonUsed),
		func() (bool, error) {
			c, err := chaos.StatusCounts(ctx, r.db, r.outbox)
			if err != nil || c[core.StatusDead] != poisonUsed {
				return false, err
			}
			if !r.position {
				return c[core.StatusDone] == events-poisonEvents, nil
			}
			lost, err := r.deliveries.Lost(ctx, r.db, r.outbox)
			if err != nil || lost == poisonEvents && finished(c) == events-poisonEvents {
				return err == nil, err
			}
			// Not an error: what is still undelivered, for the timeout.
			return false, fmt.Errorf("rows by status %v, %d undelivered: %s", c, lost, undelivered(ctx, r.db, r.outbox, r.deliveries))
		})
	total := time.Since(start)
	for _, w := range workers {
		w.stop(t, time.Minute)
	}

	counts, err := chaos.StatusCounts(ctx, r.db, r.outbox)
	if err != nil {
		t.Fatal(err)
	}
	if r.position {
		// STREAM and DONE rows together, compared as DONE.
		counts[core.StatusDone] = finished(counts)
		delete(counts, core.StatusStream)
	}
	want := map[core.Status]int{core.StatusDone: events - poisonEvents}
	if poisonUsed > 0 {
		want[core.StatusDead] = poisonUsed
	}
	if poisonEvents > poisonUsed {
		want[core.StatusWaiting] = poisonEvents - poisonUsed
	}
	for s, n := range want {
		if counts[s] != n {
			t.Errorf("rows by status %v, want %v", counts, want)
			break
		}
	}
	if len(counts) != len(want) {
		t.Errorf("rows by status %v, want %v", counts, want)
	}
	ds, err := r.orderedDeliveries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	violations, first, calls := checkOrder(ds)
	lost, err := r.deliveries.Lost(ctx, r.db, r.outbox)
	if err != nil {
		t.Fatal(err)
	}
	lost -= poisonEvents // never delivered, by design
	delivered := map[string]bool{}
	for _, d := range ds {
		delivered[d.EventID] = true
	}
	if len(poisonKeys) > 0 {
		st, err := chaos.NewOrderedStore(r.dialect, r.outbox, core.Ordering{string(chaos.Aggregate): core.DeadBlocks})
		if err != nil {
			t.Fatal(err)
		}
		blocked, err := st.(core.OrderedStore).BlockedKeys(ctx, r.db, core.DeadFilter{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		waiting := 0
		for _, b := range blocked {
			got = append(got, b.AggregateID)
			waiting += int(b.Waiting)
		}
		slices.Sort(got)
		var wantKeys []string
		for _, k := range poisonKeys {
			var n int
			if err := r.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+r.outbox+" WHERE aggregate_id = '"+k+"'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				wantKeys = append(wantKeys, k)
			}
		}
		slices.Sort(wantKeys)
		if !slices.Equal(got, wantKeys) || waiting != poisonEvents-poisonUsed {
			t.Errorf("blocked keys %v with %d waiting events, want %v with %d", got, waiting, wantKeys, poisonEvents-poisonUsed)
		}
		t.Logf("poison: %d keys blocked with %d waiting events behind them", len(got), waiting)
	}
	t.Logf("ordered crash %s %s (%s): %d events over %d keys written by %d worker processes at once (one 10 s behind, "+
		"%d started in all) in %s (written in %s), "+
		"%d kills, %.0f%% listener failures, %d successful listener calls (%d distinct events), %d order violations, %d lost, "+
		"writer retries %d (ambiguous commits %d) in the processes not killed",
		r.dialect, r.delivery, cfg.name, events, r.keys, procs, started, total.Round(100*time.Millisecond), writeTime.Round(100*time.Millisecond),
		kills, r.fail*100, calls, len(delivered), violations, lost, retries, ambiguous)
	if violations > 0 {
		t.Errorf("%d order violations; first: %s", violations, strings.Join(first, "\n"))
	}
	if lost != 0 {
		t.Errorf("%d events lost (DONE without a recorded delivery)", lost)
	}
	if kills < cfg.crashMinKills {
		t.Errorf("only %d kills, want at least %d", kills, cfg.crashMinKills)
	}
}

// undelivered describes up to 10 rows of outbox that have no delivery in d.
func undelivered(ctx context.Context, db *sql.DB, outbox string, d chaos.Deliveries) string {
	rows, err := db.QueryContext(ctx, "SELECT o.event_id, o.aggregate_id, o.status, o.seq, o.pos, o.attempts, o.locked_by, o.last_error FROM "+
		outbox+" o WHERE NOT EXISTS (SELECT 1 FROM "+d.Table()+" d WHERE d.event_id = o.event_id) ORDER BY o.pos LIMIT 10")
	if err != nil {
		return err.Error()
	}
	defer rows.Close()
	var b strings.Builder
	var keys []string
	for rows.Next() {
		var id string
		var key, lockedBy, lastErr sql.NullString
		var status, attempts int
		var seq, pos sql.NullInt64
		if err := rows.Scan(&id, &key, &status, &seq, &pos, &attempts, &lockedBy, &lastErr); err != nil {
			return err.Error()
		}
		fmt.Fprintf(&b, "\n  %s key %s status %v seq %v pos %v attempts %d locked_by %q last_error %q",
			id, key.String, core.Status(status), seq.Int64, pos.Int64, attempts, lockedBy.String, lastErr.String)
		keys = append(keys, key.String)
	}
	rows.Close()
	for _, k := range keys[:min(len(keys), 3)] {
		fmt.Fprintf(&b, "\n  key %s:", k)
		var last, done sql.NullInt64
		_ = db.QueryRowContext(ctx, "SELECT last_seq, done_seq FROM "+outbox+"_key WHERE aggregate_id = '"+k+"'").Scan(&last, &done)
		fmt.Fprintf(&b, " key row last_seq %v done_seq %v (valid %v);", last.Int64, done.Int64, last.Valid)
		krows, err := db.QueryContext(ctx, "SELECT o.pos, o.status, o.seq, o.attempts, (SELECT COUNT(*) FROM "+d.Table()+
			" d WHERE d.event_id = o.event_id) FROM "+outbox+" o WHERE o.aggregate_id = '"+k+"' ORDER BY o.pos")
		if err != nil {
			return b.String() + err.Error()
		}
		for krows.Next() {
			var pos, seq sql.NullInt64
			var status, attempts, n int
			if err := krows.Scan(&pos, &status, &seq, &attempts, &n); err != nil {
				krows.Close()
				return b.String() + err.Error()
			}
			fmt.Fprintf(&b, " %d:%v/%d/a%d/d%d", pos.Int64, core.Status(status), seq.Int64, attempts, n)
		}
		krows.Close()
	}
	return b.String()
}

// orderedDeliveries returns the run's recorded deliveries whose order is
// checked, each with its event's key and number: in the claim path every
// delivery, with its seq; in position delivery the first delivery of each
// event, with its counter's number. There a key's event is resolved in
// memory, and persisted with the floor a moment later: after a kill, the
// next reader may deliver again an event whose successor was delivered
// already (docs/design/position.md, "Ordered aggregate types").
func (r *orderedRun) orderedDeliveries(ctx context.Context) ([]chaos.OrderedDelivery, error) {
	if !r.position {
		return r.deliveries.AllOrdered(ctx, r.db, r.outbox)
	}
	ds, err := r.deliveries.AllCounted(ctx, r.db, r.outbox)
	if err != nil {
		return nil, err
	}
	first := make(map[string]bool, len(ds))
	return slices.DeleteFunc(ds, func(d chaos.OrderedDelivery) bool {
		if first[d.EventID] {
			return true
		}
		first[d.EventID] = true
		return false
	}), nil
}

// checkOrder replays the recorded deliveries, each a successful listener
// call, through the order checker, by time: a call's start and finish are
// two points, and at a tie the finish comes first (a successor may start the
// instant its predecessor finished).
func checkOrder(ds []chaos.OrderedDelivery) (violations int, first []string, calls int) {
	type point struct {
		at    time.Time
		start bool
		d     chaos.OrderedDelivery
	}
	pts := make([]point, 0, 2*len(ds))
	for _, d := range ds {
		pts = append(pts, point{d.Started, true, d}, point{d.Finished, false, d})
	}
	slices.SortStableFunc(pts, func(a, b point) int {
		if c := a.at.Compare(b.at); c != 0 {
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
	c := ordercheck.New()
	for _, p := range pts {
		if p.start {
			c.Start(p.d.AggregateID, p.d.Seq)
		} else {
			c.Finish(p.d.AggregateID, p.d.Seq, true)
		}
	}
	n, vs := c.Violations()
	return n, vs[:min(len(vs), 10)], c.Calls()
}

// TestCheckOrder: the replay of recorded deliveries reports a successor
// started before its predecessor finished, and accepts a redelivery of a
// finished head and a successor starting the instant its predecessor ended.
func TestCheckOrder(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	d := func(key string, seq int64, from, to int) chaos.OrderedDelivery {
		return chaos.OrderedDelivery{Delivery: chaos.Delivery{EventID: fmt.Sprint(key, seq, from), Started: at(from), Finished: at(to)},
			AggregateID: key, Seq: seq}
	}
	good := []chaos.OrderedDelivery{d("a", 1, 0, 10), d("a", 1, 12, 20), d("a", 2, 20, 30), d("b", 1, 5, 40), d("b", 2, 41, 42)}
	if n, vs, calls := checkOrder(good); n != 0 || calls != 5 {
		t.Errorf("in-order deliveries: %d violations %v, %d calls", n, vs, calls)
	}
	overlap := []chaos.OrderedDelivery{d("a", 1, 0, 10), d("a", 2, 9, 30)}
	if n, _, _ := checkOrder(overlap); n != 1 {
		t.Errorf("successor started before its predecessor finished: %d violations, want 1", n)
	}
	back := []chaos.OrderedDelivery{d("a", 1, 0, 10), d("a", 2, 11, 20), d("a", 1, 21, 22)}
	if n, _, _ := checkOrder(back); n != 1 {
		t.Errorf("call going back to an earlier event: %d violations, want 1", n)
	}
}
