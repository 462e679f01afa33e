package main

import (
	"bufio"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/txctx"
)

// A W5 child is one of the two outbox processes of a W5 run (see w5.go).
// Protocol: it prints "ready" once its dispatcher and poller run, starts
// writing when a line "go" comes on its stdin, prints "written txs=<n>
// events=<n> retries=<n>" when its transactions are committed, keeps
// delivering until its stdin closes, then shuts down, writes its
// w5ChildResult to its Out file and prints "stopped".

// w5Payload is the JSON of a W5 event: its key and its number in the key,
// from the aggregate's counter, and padding to about 200 bytes.
type w5Payload struct {
	K   string `json:"k"`
	N   int64  `json:"n"`
	Pad string `json:"pad"`
}

var w5Pad = strings.Repeat("x", 160)

// runW5Child runs the child whose configuration is js (w5ChildEnv).
func runW5Child(js string) error {
	var cc w5ChildConfig
	if err := json.Unmarshal([]byte(js), &cc); err != nil {
		return fmt.Errorf("%s: %w", w5ChildEnv, err)
	}
	ctx := context.Background()
	var tg *target
	if cc.DB == "sqlite" {
		tg = sqliteTargetAt(cc.SQLitePath)
	} else {
		tgs, err := targets(cc.DB)
		if err != nil {
			return err
		}
		if len(tgs) != 1 {
			return fmt.Errorf("no DSN for %s in this process's environment", cc.DB)
		}
		tg = tgs[0]
	}
	conns := cc.Writers + cc.Workers + 4
	var tr *w5Tracer
	var db *sql.DB
	var err error
	if cc.Trace {
		tr = &w5Tracer{}
		dsn := os.Getenv(map[string]string{"postgres": "OUTBOX_POSTGRES_DSN", "mysql": "OUTBOX_MYSQL_DSN"}[tg.name])
		db, err = openTraced(tg, dsn, conns, tr)
	} else {
		db, err = tg.open(conns)
	}
	if err != nil {
		return err
	}
	defer db.Close()
	var ordering core.Ordering
	if cc.Ordered {
		ordering = core.Ordering{orderAgg.Name(): core.DeadBlocks}
	}
	raw, err := tg.newStore(cc.Table, ordering)
	if err != nil {
		return err
	}
	// Per event: when its successful delivery finished, and when the DONE
	// call that recorded it started and returned.
	type doneTimes struct{ delivered, start, end time.Time }
	var (
		timesMu sync.Mutex
		times   = map[string]*doneTimes{}
	)
	timesOf := func(id string) *doneTimes {
		t := times[id]
		if t == nil {
			t = &doneTimes{}
			times[id] = t
		}
		return t
	}
	var cs callStats
	cs.onDone = func(ids []string, start, end time.Time) {
		timesMu.Lock()
		for _, id := range ids {
			t := timesOf(id)
			t.start, t.end = start, end
		}
		timesMu.Unlock()
	}
	st := newTimedStore(raw, &cs, nil)

	var (
		mu         sync.Mutex
		deliveries []w5Delivery
		failRNG    = rand.New(rand.NewPCG(cc.Seed, 1<<20))
	)
	listener := core.ListenerFunc(func(_ context.Context, ev core.Event) error {
		start := time.Now()
		var p w5Payload
		if err := json.Unmarshal(ev.RawPayload(), &p); err != nil {
			return fmt.Errorf("W5 payload: %w", err)
		}
		if cc.NoCounter {
			p.N = ev.Seq // the store's numbering (0 unordered)
		}
		mu.Lock()
		fail := failRNG.Float64() < cc.Fail
		deliveries = append(deliveries, w5Delivery{ID: ev.ID(), Key: p.K, N: p.N, Start: start.UnixNano(),
			Finish: time.Now().UnixNano(), OK: !fail})
		mu.Unlock()
		if fail {
			return errors.New("injected listener failure")
		}
		timesMu.Lock()
		timesOf(ev.ID()).delivered = time.Now()
		timesMu.Unlock()
		return nil
	})
	reg := core.NewRegistry()
	if err := reg.Register(orderAgg, orderPlaced, listener); err != nil {
		return err
	}
	m := &metrics{}
	quiet := slog.New(slog.DiscardHandler)
	d, err := dispatch.New(dispatch.Config{
		Store: st, DB: db, Registry: reg, Metrics: m, Logger: quiet,
		Workers: cc.Workers, HotQueueSize: cc.HotQueue, ColdQueueSize: cc.ColdQueue,
		MaxAttempts:     1000,
		Retry:           &core.ExponentialBackoff{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond},
		DoneBatchSize:   cc.DoneBatch,
		DoneBatchLinger: cc.DoneLinger,
	})
	if err != nil {
		return err
	}
	p, err := poller.New(poller.Config{Store: st, DB: db, Handler: d, Metrics: m, Logger: quiet,
		BatchSize: cc.PollBatch, MaxBatchSize: cc.PollMaxBatch, Interval: cc.PollInterval, BusyInterval: cc.BusyInterval, NoWatch: cc.NoWake})
	if err != nil {
		return err
	}
	w, err := core.NewWriter(core.WriterConfig{Store: st, Hook: d.WriterHook(), NoNotify: cc.NoWake, Logger: quiet})
	if err != nil {
		return err
	}
	txm, err := txctx.New(db, txctx.Config{})
	if err != nil {
		return err
	}
	stopProfiles, err := startW5Profiles(cc.Profile)
	if err != nil {
		return err
	}
	if err := d.Start(ctx); err != nil {
		return err
	}
	if err := p.Start(ctx); err != nil {
		_ = d.Close(ctx)
		return err
	}
	fmt.Println("ready")

	in := bufio.NewScanner(os.Stdin)
	started := false
	for !started && in.Scan() {
		started = in.Text() == "go"
	}
	if !started { // the parent went away before the start
		return errors.Join(p.Close(ctx), d.Close(ctx), errors.New("stdin closed before the start signal"))
	}
	var (
		commitsMu sync.Mutex
		commits   = map[string]int64{} // when each event's transaction committed, Unix ns
	)
	bump := w5Bump(tg, cc.AggTable)
	if cc.NoCounter {
		bump = nil
	}
	txs, events, retries, werr := w5Writes(ctx, cc, func(ctx context.Context, rng *rand.Rand) (int, int, error) {
		key := w5Key(rng.IntN(cc.Keys))
		count := 1
		if x := rng.Float64(); x < w5Multi/2 {
			count = 2
		} else if x < w5Multi {
			count = 3
		}
		hot := rng.Float64() < cc.Hot
		for attempt := 0; ; attempt++ {
			ids, err := w5Transaction(ctx, db, txm, w, bump, key, count, hot)
			if err == nil {
				at := time.Now().UnixNano()
				commitsMu.Lock()
				for _, id := range ids {
					commits[id] = at
				}
				commitsMu.Unlock()
				return count, attempt, nil
			}
			if attempt == 10 {
				return 0, attempt, fmt.Errorf("transaction on %s: giving up after %d retries: %w", key, attempt, err)
			}
			time.Sleep(time.Duration(attempt+1) * 10 * time.Millisecond) // an application's backoff before it tries again
		}
	})
	fmt.Printf("written txs=%d events=%d retries=%d\n", txs, events, retries)
	for in.Scan() { // until stdin closes
	}
	perr := p.Close(ctx)
	derr := d.Close(ctx)
	stopProfiles()
	mu.Lock()
	res := w5ChildResult{Deliveries: deliveries, Inserts: w5DurationsOf(&cs.inserts), Claims: w5DurationsOf(&cs.claims),
		Done: w5DurationsOf(&cs.done), Txs: txs, Events: events, Retries: retries, Hot: m.hot.Load(), StoreErrors: m.storeErrors.Load()}
	if tr != nil {
		res.Trace = tr.take()
	}
	commitsMu.Lock()
	res.Commits = commits
	commitsMu.Unlock()
	timesMu.Lock()
	for _, t := range times {
		if t.delivered.IsZero() || t.start.IsZero() || t.start.Before(t.delivered) {
			continue // delivered by the other process, or recorded by an earlier delivery's DONE
		}
		res.DoneWait = append(res.DoneWait, int64(t.start.Sub(t.delivered)))
		res.DoneWrite = append(res.DoneWrite, int64(t.end.Sub(t.start)))
	}
	timesMu.Unlock()
	mu.Unlock()
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if err := os.WriteFile(cc.Out, b, 0o600); err != nil {
		return err
	}
	fmt.Println("stopped")
	return errors.Join(werr, perr, derr)
}

// w5Bump returns the statement that adds to an aggregate's counter (args:
// the count, the key) and returns the counter after it, and a function
// running it in a transaction.
func w5Bump(tg *target, agg string) func(ctx context.Context, tx core.DBTX, key string, count int) (int64, error) {
	if tg.name == "mysql" {
		// No RETURNING: the new value comes back as the statement's insert
		// id.
		q := "UPDATE " + agg + " SET n = LAST_INSERT_ID(n + ?) WHERE k = ?"
		return func(ctx context.Context, tx core.DBTX, key string, count int) (int64, error) {
			res, err := tx.ExecContext(ctx, q, count, key)
			if err != nil {
				return 0, err
			}
			return res.LastInsertId()
		}
	}
	q := tg.rebind("UPDATE " + agg + " SET n = n + ? WHERE k = ? RETURNING n")
	return func(ctx context.Context, tx core.DBTX, key string, count int) (int64, error) {
		var n int64
		err := tx.QueryRowContext(ctx, q, count, key).Scan(&n)
		return n, err
	}
}

// w5Transaction is one business transaction: it adds count to key's
// counter, locking the aggregate's row, and writes count events of key
// numbered by it (with bump nil, it writes the events alone), through the
// hot path (the context-carried transaction of
// txm) or, with hot false, through WriteTx on a plain *sql.Tx.
func w5Transaction(ctx context.Context, db *sql.DB, txm *txctx.Manager, w *core.Writer, bump func(context.Context, core.DBTX, string, int) (int64, error), key string, count int, hot bool) (ids []string, err error) {
	write := func(ctx context.Context, tx core.DBTX) ([]core.Envelope, error) {
		ids = ids[:0]
		var n int64
		if bump != nil {
			var err error
			if n, err = bump(ctx, tx, key, count); err != nil {
				return nil, err
			}
		}
		envs := make([]core.Envelope, count)
		for i := range envs {
			b, err := json.Marshal(w5Payload{K: key, N: n - int64(count) + 1 + int64(i), Pad: w5Pad})
			if err != nil {
				return nil, err
			}
			if envs[i], err = core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, AggregateType: orderAgg, AggregateID: key, JSON: b}); err != nil {
				return nil, err
			}
			ids = append(ids, envs[i].ID())
		}
		return envs, nil
	}
	if hot {
		return ids, txm.Do(ctx, func(ctx context.Context) error {
			tx, ok := core.TxFromContext(ctx)
			if !ok {
				return core.ErrNoTransaction
			}
			envs, err := write(ctx, tx)
			if err != nil {
				return err
			}
			_, err = w.WriteAll(ctx, envs)
			return err
		})
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	envs, err := write(ctx, tx)
	if err == nil {
		_, err = w.WriteAllTx(ctx, tx, envs)
	}
	if err != nil {
		_ = tx.Rollback()
		return nil, err
	}
	return ids, tx.Commit()
}

// startW5Profiles starts the CPU profile and the block and mutex sampling of
// a child when prefix is not "", and returns the function that writes them
// to prefix + ".cpu", ".block" and ".mutex".
func startW5Profiles(prefix string) (func(), error) {
	if prefix == "" {
		return func() {}, nil
	}
	f, err := os.Create(prefix + ".cpu")
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	runtime.SetBlockProfileRate(int(time.Microsecond))
	runtime.SetMutexProfileFraction(10)
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		for _, name := range []string{"block", "mutex"} {
			if out, err := os.Create(prefix + "." + name); err == nil {
				_ = pprof.Lookup(name).WriteTo(out, 0)
				_ = out.Close()
			}
		}
	}, nil
}

// w5Writes runs the child's writers: cc.Writers goroutines commit cc.Txs
// transactions between them through write, which is given the goroutine's
// random source, and return the events written and the retries.
func w5Writes(ctx context.Context, cc w5ChildConfig, write func(ctx context.Context, rng *rand.Rand) (events, retries int, err error)) (txs, events, retries int, err error) {
	var (
		mu    sync.Mutex
		next  int
		wg    sync.WaitGroup
		first error
	)
	for g := range cc.Writers {
		rng := rand.New(rand.NewPCG(cc.Seed, uint64(g)))
		wg.Go(func() {
			for {
				mu.Lock()
				if next >= cc.Txs || first != nil {
					mu.Unlock()
					return
				}
				next++
				mu.Unlock()
				n, r, err := write(ctx, rng)
				mu.Lock()
				retries += r
				if err != nil {
					first = cmp.Or(first, err)
				} else {
					txs++
					events += n
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return txs, events, retries, first
}
