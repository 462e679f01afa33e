package main

import (
	"context"
	"database/sql"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
)

// bizDDL returns the CREATE TABLE of the business table.
func (tg *target) bizDDL(name string) string {
	switch tg.name {
	case "postgres":
		return "CREATE TABLE " + name + " (id VARCHAR(36) PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount BIGINT NOT NULL, created_at TIMESTAMPTZ NOT NULL)"
	case "mysql":
		return "CREATE TABLE " + name + " (id VARCHAR(36) PRIMARY KEY, customer VARCHAR(64) NOT NULL, amount BIGINT NOT NULL, created_at DATETIME(6) NOT NULL) ENGINE = InnoDB"
	}
	return "CREATE TABLE " + name + " (id TEXT PRIMARY KEY, customer TEXT NOT NULL, amount INTEGER NOT NULL, created_at TEXT NOT NULL)"
}

// bizTable creates a fresh business table and returns its name and a drop
// function.
func bizTable(ctx context.Context, tg *target, db *sql.DB) (string, func(), error) {
	name := uniqueName("biz")
	if _, err := db.ExecContext(ctx, tg.bizDDL(name)); err != nil {
		return "", nil, fmt.Errorf("create business table: %w", err)
	}
	return name, func() {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = db.ExecContext(c, "DROP TABLE IF EXISTS "+name)
	}, nil
}

// w1Data is the input of every W1 run: one event id and payload per
// transaction.
type w1Data struct {
	ids      []string
	payloads [][]byte
}

func newW1Data(n int) *w1Data {
	d := &w1Data{ids: make([]string, n), payloads: make([][]byte, n)}
	for i := range n {
		d.ids[i] = core.NewEventID()
		d.payloads[i] = payload(i)
	}
	return d
}

// writeAll runs writers goroutines that take transaction numbers in turn
// until n are done, and returns the elapsed time.
func writeAll(ctx context.Context, n, writers int, write func(w, i int) error) (time.Duration, error) {
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := write(w, i); err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("transaction %d: %w", i, err)
					}
					mu.Unlock()
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return time.Since(start), first
}

// w1Baseline runs the writers without the outbox library: the business row
// alone, or with a raw single-row outbox INSERT into a table of the store's
// schema.
func w1Baseline(ctx context.Context, c *config, tg *target, data *w1Data, withOutbox bool) (result, error) {
	db, err := tg.open(c.poolSize(1))
	if err != nil {
		return result{}, err
	}
	defer db.Close()
	biz, dropBiz, err := bizTable(ctx, tg, db)
	if err != nil {
		return result{}, err
	}
	defer dropBiz()
	bizInsert := tg.rebind("INSERT INTO " + biz + " (id, customer, amount, created_at) VALUES (?, ?, ?, ?)")
	var outboxInsert string
	if withOutbox {
		t, err := newTable(ctx, tg, db, "raw")
		if err != nil {
			return result{}, err
		}
		defer t.drop(ctx)
		outboxInsert = rawOutboxInsert(tg, t.st.Table())
	}
	cpu0 := tg.cpu()
	elapsed, err := writeAll(ctx, len(data.ids), c.writers, func(_, i int) error {
		return rawOrder(ctx, tg, db, data, bizInsert, outboxInsert, i)
	})
	if err != nil {
		return result{}, err
	}
	cpu, serverCPU := tg.since(cpu0)
	run := "business row only (floor)"
	if withOutbox {
		run = "business + raw outbox INSERT"
	}
	return result{Run: run, Events: len(data.ids), Seconds: elapsed.Seconds(),
		PerSec: float64(len(data.ids)) / elapsed.Seconds(), CPUSeconds: cpu, ServerCPUSeconds: serverCPU}, nil
}

// rawOutboxInsert is the single-row INSERT of an event into table, as a
// hand-written outbox would write it.
func rawOutboxInsert(tg *target, table string) string {
	return tg.rebind("INSERT INTO " + table + " (event_id, event_type, aggregate_type, aggregate_id, " +
		"payload, status, attempts, available_at, created_at) VALUES (?, ?, ?, ?, ?, 0, 0, ?, ?)")
}

// rawOrder is one business transaction without the library: business row
// i, and with outboxInsert (not "") its event inserted by hand.
func rawOrder(ctx context.Context, tg *target, db *sql.DB, data *w1Data, bizInsert, outboxInsert string, i int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	now := tg.encodeTime(time.Now())
	orderID := fmt.Sprintf("o-%09d", i)
	if _, err := tx.ExecContext(ctx, bizInsert, orderID, fmt.Sprintf("c-%05d", i%50000), 4200+i%1000, now); err != nil {
		_ = tx.Rollback()
		return err
	}
	if outboxInsert != "" {
		if _, err := tx.ExecContext(ctx, outboxInsert, data.ids[i], orderPlaced.Name(), orderAgg.Name(), orderID,
			data.payloads[i], now, now); err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// w1Outbox runs the writers through core.Writer with instances
// dispatcher+poller instances delivering; writer w uses instance w % instances.
// It returns the run's result and its commit-to-listener latencies, split
// into the events written as their key's head (every unordered one) and
// those written WAITING.
//
// With keys > 0 the aggregate type is ordered (core.Ordering) and the
// transactions write to keys aggregate ids in turn.
//
// With onPgx the instances run on pgx: see openInstance.
func w1Outbox(ctx context.Context, c *config, tg *target, data *w1Data, instances, keys int, onPgx, pos bool, cs *callStats) (result, w1Latencies, error) {
	admin, err := tg.open(2)
	if err != nil {
		return result{}, w1Latencies{}, err
	}
	defer admin.Close()
	biz, dropBiz, err := bizTable(ctx, tg, admin)
	if err != nil {
		return result{}, w1Latencies{}, err
	}
	defer dropBiz()
	var ordering core.Ordering
	if keys > 0 {
		ordering = core.Ordering{orderAgg.Name(): core.DeadBlocks}
	}
	t, err := newOrderedTable(ctx, tg, admin, "w1", ordering)
	if err != nil {
		return result{}, w1Latencies{}, err
	}
	defer t.drop(ctx)
	bizInsert := tg.rebind("INSERT INTO " + biz + " (id, customer, amount, created_at) VALUES (?, ?, ?, ?)")

	// The events' ids are generated, as a service leaves them (pgxtx sends
	// such a write with COMMIT); the raw baseline's are data.ids.
	rec := newGeneratedRecorder(len(data.ids))
	rec.reset()
	st := newTimedStore(t.st, cs, rec.wroteWaiting)
	if pos {
		st = positional{st}
	}
	var ins []*instance
	defer func() {
		for _, in := range ins {
			_ = in.close(ctx)
			in.release()
		}
	}()
	for range instances {
		in, err := openInstance(ctx, c, tg, st, c.poolSize(instances), rec, onPgx)
		if err != nil {
			return result{}, w1Latencies{}, err
		}
		ins = append(ins, in)
	}
	start, cpu0 := time.Now(), tg.cpu()
	_, err = writeAll(ctx, len(data.ids), c.writers, func(w, i int) error {
		in := ins[w%len(ins)]
		orderID := fmt.Sprintf("o-%09d", i)
		aggID := orderID
		if keys > 0 {
			aggID = fmt.Sprintf("k-%06d", i%keys)
		}
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, AggregateType: orderAgg,
			AggregateID: aggID, JSON: data.payloads[i]})
		if err != nil {
			return err
		}
		rec.bind(env.ID(), i)
		return in.placeOrder(ctx, tg, bizInsert, i, []core.Envelope{env}, func() { rec.commit(i) })
	})
	if err != nil {
		return result{}, w1Latencies{}, err
	}
	doneAt, err := t.waitDone(ctx, rec, c.timeout)
	if err != nil {
		return result{}, w1Latencies{}, err
	}
	elapsed := doneAt.Sub(start)
	cpu, serverCPU := tg.since(cpu0)
	var hot, storeErrors int64
	for _, in := range ins {
		hot += in.m.hot.Load()
		storeErrors += in.m.storeErrors.Load()
	}
	n := len(data.ids)
	var lat w1Latencies
	lat.heads, lat.waited = rec.splitLatencies()
	return result{
		Events: n, Seconds: elapsed.Seconds(), PerSec: float64(n) / elapsed.Seconds(),
		Duplicates: rec.duplicates(), HotPct: 100 * float64(hot) / float64(n), StoreErrors: storeErrors,
		CPUSeconds: cpu, ServerCPUSeconds: serverCPU,
	}, lat, nil
}

// w1Latencies are the commit-to-listener latencies of a W1 run, sorted:
// of the events written as their key's head (NEW, leased for the hot path;
// every unordered event is one) and of the ordered events written WAITING
// behind an unfinished one of their key.
type w1Latencies struct{ heads, waited []time.Duration }

// placeOrder is one W1 business transaction on in: business row i and
// envs (W1 writes one, the soak may write several), through the
// instance's transaction manager and writer. committed, when not nil, runs
// right after COMMIT, before the writer's hook hands envs to the hot path.
func (in *instance) placeOrder(ctx context.Context, tg *target, bizInsert string, i int, envs []core.Envelope, committed func()) error {
	return in.do(ctx, func(ctx context.Context) error {
		tx, ok := core.TxFromContext(ctx)
		if !ok {
			return core.ErrNoTransaction
		}
		if _, err := tx.ExecContext(ctx, bizInsert, fmt.Sprintf("o-%09d", i), fmt.Sprintf("c-%05d", i%50000), 4200+i%1000,
			tg.encodeTime(time.Now())); err != nil {
			return err
		}
		if committed != nil {
			// Registered before the writer's hook, so it runs first.
			tx.AfterCommit(func(context.Context) { committed() })
		}
		if len(envs) == 1 {
			_, err := in.w.Write(ctx, envs[0])
			return err
		}
		_, err := in.w.WriteAll(ctx, envs)
		return err
	})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// merge sums the rounds of one run into one result.
func merge(run string, rounds []result, lat []time.Duration) result {
	r := result{Run: run, Rounds: len(rounds)}
	var hot float64
	for _, x := range rounds {
		r.Events += x.Events
		r.Seconds += x.Seconds
		r.Duplicates += x.Duplicates
		r.StoreErrors += x.StoreErrors
		r.CPUSeconds += x.CPUSeconds
		if r.ServerCPUSeconds >= 0 {
			r.ServerCPUSeconds += x.ServerCPUSeconds
		}
		if x.ServerCPUSeconds < 0 {
			r.ServerCPUSeconds = -1
		}
		hot += x.HotPct * float64(x.Events) / 100
		r.RoundRates = append(r.RoundRates, x.PerSec)
	}
	r.PerSec = float64(r.Events) / r.Seconds
	if lat != nil {
		slices.Sort(lat)
		r.P50Ms, r.P99Ms, r.MaxMs = ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99)), ms(percentile(lat, 1))
		r.HotPct = 100 * hot / float64(r.Events)
	}
	return r
}

// runW1 runs the floor once, then -rounds rounds of: the raw outbox INSERT
// baseline, one instance and (with w3) two instances, each over
// -w1-events/-rounds transactions. Alternating them spreads the load other
// processes put on the machine over all of them; each figure is the total
// over its rounds. It prints their table.
func runW1(ctx context.Context, c *config, tg *target, w1, w3 bool) ([]result, error) {
	per := c.w1Events / c.rounds
	data := newW1Data(per)
	fmt.Printf("\n[%s] W1 live: %d transactions in %d rounds, %d writers\n", tg.name, per*c.rounds, c.rounds, c.writers)
	var floor result
	if c.w1Only == "" {
		var err error
		if floor, err = w1Baseline(ctx, c, tg, data, false); err != nil {
			return nil, fmt.Errorf("business only: %w", err)
		}
	}
	type kind struct {
		name      string
		instances int // 0: the raw baseline
		keys      int // > 0: ordered over this many keys
		pgx       bool
		pos       bool // position delivery
		rawDone   bool // the raw INSERT with its DONE batches (w1RawDone)
		rounds    []result
		lat       w1Latencies
		stats     callStats
		counted   counters // process counters over its rounds
	}
	kinds := []*kind{{name: "business + raw outbox INSERT"}}
	if tg.name == "sqlite" || c.rawDone {
		kinds = append(kinds, &kind{name: "raw INSERT + raw DONE batches", rawDone: true})
	}
	if w1 || w3 {
		kinds = append(kinds, &kind{name: "outbox, 1 instance", instances: 1})
	}
	if (w1 || w3) && c.position && tg.hasPosition() {
		kinds = append(kinds, &kind{name: "outbox position, 1 instance", instances: 1, pos: true})
	}
	if (w1 || w3) && tg.openPgx != nil && c.pgx {
		kinds = append(kinds, &kind{name: "outbox on pgx, 1 instance", instances: 1, pgx: true})
	}
	if w3 {
		kinds = append(kinds, &kind{name: "outbox, 2 instances (W3)", instances: 2})
	}
	for _, keys := range c.orderedKeys {
		kinds = append(kinds, &kind{name: fmt.Sprintf("outbox ordered, %d keys, 1 instance", keys), instances: 1, keys: keys})
		if (w1 || w3) && c.position && tg.hasPosition() {
			kinds = append(kinds, &kind{name: fmt.Sprintf("outbox position ordered, %d keys, 1 instance", keys), instances: 1, keys: keys, pos: true})
		}
	}
	if c.w1Only != "" {
		kinds = slices.DeleteFunc(kinds, func(k *kind) bool { return !strings.HasPrefix(k.name, c.w1Only) })
		if len(kinds) == 0 {
			return nil, fmt.Errorf("-w1-only %q: no W1 row's name starts with it", c.w1Only)
		}
	}
	for round := range c.rounds {
		// Each round starts one row later, so that no row always runs
		// right after the same others (the last row of every round
		// inherited the server's background work of the runs before it:
		// PostgreSQL's checkpoints and autovacuum, InnoDB's purge).
		for i := range kinds {
			k := kinds[(round+i)%len(kinds)]
			fmt.Printf("    round %d: %s ...\n", round+1, k.name)
			var (
				r   result
				lat w1Latencies
				err error
			)
			// Labelled, so that a profile (-cpuprofile) tells the runs apart:
			// go tool pprof -tagfocus 'w1=^outbox. 1 instance' ... (a comma
			// would split the pattern in two).
			before := readCounters()
			pprof.Do(ctx, pprof.Labels("w1", k.name), func(ctx context.Context) {
				switch {
				case k.rawDone:
					r, err = w1RawDone(ctx, c, tg, data)
				case k.instances == 0:
					r, err = w1Baseline(ctx, c, tg, data, true)
				default:
					r, lat, err = w1Outbox(ctx, c, tg, data, k.instances, k.keys, k.pgx, k.pos, &k.stats)
				}
			})
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k.name, err)
			}
			k.counted = k.counted.add(readCounters().sub(before))
			k.rounds = append(k.rounds, r)
			k.lat.heads = append(k.lat.heads, lat.heads...)
			k.lat.waited = append(k.lat.waited, lat.waited...)
		}
	}
	floor.Run = "business row only (floor)"
	floor.Rounds, floor.RoundRates = 1, []float64{floor.PerSec}
	rs := []result{floor}
	if c.w1Only != "" {
		rs = nil
	}
	for _, k := range kinds {
		var lat []time.Duration
		if k.instances > 0 {
			lat = slices.Concat(k.lat.heads, k.lat.waited)
		}
		r := merge(k.name, k.rounds, lat)
		if k.instances > 0 {
			r.StoreStats = k.stats.String()
		}
		if k.keys > 0 {
			r.Keys = k.keys
			slices.Sort(k.lat.heads)
			slices.Sort(k.lat.waited)
			r.HeadPct = 100 * float64(len(k.lat.heads)) / float64(max(len(lat), 1))
			r.HeadP50Ms, r.HeadP99Ms = ms(percentile(k.lat.heads, 0.50)), ms(percentile(k.lat.heads, 0.99))
			r.WaitedP50Ms, r.WaitedP99Ms = ms(percentile(k.lat.waited, 0.50)), ms(percentile(k.lat.waited, 0.99))
		}
		rs = append(rs, r)
	}
	base := rs[min(1, len(rs)-1)].PerSec
	unordered := 0.0
	for _, r := range rs {
		if r.Run == "outbox, 1 instance" {
			unordered = r.PerSec
		}
	}
	for i := range rs {
		rs[i].DB, rs[i].Workload = tg.name, "W1"
		rs[i].Baseline = rs[min(1, len(rs)-1)].Run
		rs[i].Ratio = rs[i].PerSec / base
		if rs[i].Keys > 0 && unordered > 0 {
			rs[i].VsUnordered = rs[i].PerSec / unordered
		}
	}
	printW1(tg, c, rs)
	fmt.Println("  Per event, whole process, each run's setup included:")
	for _, k := range kinds {
		fmt.Printf("    %s: %s\n", k.name, k.counted.perEvent(per*c.rounds))
	}
	return rs, nil
}
