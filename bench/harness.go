package main

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/txctx"
)

var (
	orderAgg    = core.AggregateName("Order")
	orderPlaced = core.EventName("OrderPlaced")
)

// payload returns the ~200-byte JSON document of event i.
func payload(i int) []byte {
	p := fmt.Sprintf(`{"orderId":"o-%09d","customer":"c-%05d","amount":%d,"currency":"EUR",`+
		`"items":[{"sku":"sku-%03d","qty":2,"price":1200},{"sku":"sku-%03d","qty":1,"price":1800}],"note":"`,
		i, i%50000, 4200+i%1000, i%997, (i+1)%997)
	const size = 200
	if pad := size - len(p) - 2; pad > 0 {
		p += strings.Repeat("x", pad)
	}
	return []byte(p + `"}`)
}

// recorder is the no-op listener of every run: it counts deliveries, finds
// duplicates and, for W1, notes when each event committed and when it first
// reached the listener.
type recorder struct {
	n     int
	index func(id string) (int, bool) // the event's number
	bind  func(id string, i int)      // with generated ids: id is event i's
	// latency: keep per-event commit and delivery times (W1). A backlog
	// recorder keeps one bit per event, so that the bench's own memory stays
	// small and the peak RSS of a drain shows the library's.
	latency   bool
	start     time.Time
	committed []atomic.Int64 // ns since start + 1; 0 = not noted
	received  []atomic.Int64
	waited    []atomic.Bool   // ordered events the store wrote WAITING (not heads at write)
	seen      []atomic.Uint64 // one bit per event
	delivered atomic.Int64    // distinct events delivered
	extra     atomic.Int64    // deliveries of events already delivered
	all       chan struct{}
	allOnce   sync.Once
}

// newRecorder returns a recorder of the events ids, with latencies.
func newRecorder(ids []string) *recorder {
	index := make(map[string]int, len(ids))
	for i, id := range ids {
		index[id] = i
	}
	return &recorder{n: len(ids), latency: true, index: func(id string) (int, bool) {
		i, ok := index[id]
		return i, ok
	}}
}

// newGeneratedRecorder returns a recorder, with latencies, of n events
// whose ids the library generates as they are written: each is bound to
// its number with bind before its transaction commits.
func newGeneratedRecorder(n int) *recorder {
	var index sync.Map
	r := &recorder{n: n, latency: true, index: func(id string) (int, bool) {
		i, ok := index.Load(id)
		if !ok {
			return 0, false
		}
		return i.(int), true
	}}
	r.bind = func(id string, i int) { index.Store(id, i) }
	return r
}

// numberedID returns the id of backlog event i: 26 digits, as long as a
// ULID. The recorder of a backlog finds an event's number in its id instead
// of in a map of a million strings.
func numberedID(i int) string { return fmt.Sprintf("%026d", i) }

// newNumberedRecorder returns a recorder of the events numberedID(0..n-1),
// without latencies.
func newNumberedRecorder(n int) *recorder {
	return &recorder{n: n, index: func(id string) (int, bool) {
		i, err := strconv.Atoi(id)
		return i, err == nil && i >= 0 && i < n && len(id) == 26
	}}
}

// reset prepares the recorder for a new run over the same ids.
func (r *recorder) reset() {
	r.committed, r.received, r.waited = nil, nil, nil
	if r.latency {
		r.committed = make([]atomic.Int64, r.n)
		r.received = make([]atomic.Int64, r.n)
		r.waited = make([]atomic.Bool, r.n)
	}
	r.seen = make([]atomic.Uint64, (r.n+63)/64)
	r.delivered.Store(0)
	r.extra.Store(0)
	r.all = make(chan struct{})
	r.allOnce = sync.Once{}
	r.start = time.Now()
}

func (r *recorder) since() int64 { return int64(time.Since(r.start)) + 1 }

func (r *recorder) commit(i int) { r.committed[i].Store(r.since()) }

// Handle is the listener.
func (r *recorder) Handle(_ context.Context, ev core.Event) error {
	i, ok := r.index(ev.ID())
	if !ok {
		return nil // not an event of this run
	}
	bit := uint64(1) << (i % 64)
	if r.seen[i/64].Or(bit)&bit != 0 {
		r.extra.Add(1)
		return nil
	}
	if r.latency {
		r.received[i].Store(r.since())
	}
	if r.delivered.Add(1) == int64(r.n) {
		r.allOnce.Do(func() { close(r.all) })
	}
	return nil
}

// duplicates returns how many deliveries were of an event already
// delivered.
func (r *recorder) duplicates() int { return int(r.extra.Load()) }

// latencies returns the commit-to-listener latencies of the events whose
// commit was noted, sorted.
func (r *recorder) latencies() []time.Duration { return r.latenciesFrom(0) }

// wroteWaiting notes the events of ids the store wrote WAITING: behind an
// unfinished event of their key, so not for the hot path at once.
func (r *recorder) wroteWaiting(ids []string) {
	for _, id := range ids {
		if i, ok := r.index(id); ok && r.waited != nil {
			r.waited[i].Store(true)
		}
	}
}

// splitLatencies returns, sorted, the latencies of the events whose commit
// and delivery were both noted, split into those written as their key's
// head (NEW, leased for the hot path; every unordered event) and those
// written WAITING.
func (r *recorder) splitLatencies() (heads, waited []time.Duration) {
	for i := range r.committed {
		if r.committed[i].Load() == 0 || r.received[i].Load() == 0 {
			continue
		}
		if r.waited[i].Load() {
			waited = append(waited, r.latencyOf(i))
		} else {
			heads = append(heads, r.latencyOf(i))
		}
	}
	slices.Sort(heads)
	slices.Sort(waited)
	return heads, waited
}

// latencyOf returns event i's commit-to-listener latency, or 0 if either
// time was not noted.
func (r *recorder) latencyOf(i int) time.Duration {
	c, rc := r.committed[i].Load(), r.received[i].Load()
	if c == 0 || rc == 0 {
		return 0
	}
	return time.Duration(max(rc-c, 0))
}

// latenciesFrom returns the latencies of the events from..n-1 whose commit
// and delivery were both noted, sorted.
func (r *recorder) latenciesFrom(from int) []time.Duration {
	out := make([]time.Duration, 0, len(r.committed))
	for i := from; i < len(r.committed); i++ {
		if r.committed[i].Load() != 0 && r.received[i].Load() != 0 {
			out = append(out, r.latencyOf(i))
		}
	}
	slices.Sort(out)
	return out
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// metrics counts the hot-path deliveries and the store errors of a run.
type metrics struct {
	hot, storeErrors atomic.Int64
}

func (m *metrics) HotEnqueued()              { m.hot.Add(1) }
func (m *metrics) HotDropped()               {}
func (m *metrics) ColdEnqueued()             {}
func (m *metrics) DispatchSuccess()          {}
func (m *metrics) DispatchFailure()          {}
func (m *metrics) DispatchDead()             {}
func (m *metrics) StoreError()               { m.storeErrors.Add(1) }
func (m *metrics) QueueDepths(_, _ int)      {}
func (m *metrics) OldestLag(_ time.Duration) {}

var _ core.Metrics = (*metrics)(nil)

// instance is one running outbox: what a service wires in main.
type instance struct {
	db *sql.DB
	d  *dispatch.Dispatcher
	p  *poller.Poller
	w  *core.Writer
	// do runs fn in a business transaction that core.TxFromContext finds:
	// txctx's on db, or pgxtx's on pool.
	do   func(ctx context.Context, fn func(ctx context.Context) error) error
	pool *pgxpool.Pool // the pool under db on pgx, else nil
	m    *metrics
	r    *position.Reader // position delivery, else nil
}

func startInstance(ctx context.Context, cfg *config, st store.SchemaManager, db *sql.DB, l core.Listener) (*instance, error) {
	reg := core.NewRegistry()
	if err := reg.Register(orderAgg, orderPlaced, l); err != nil {
		return nil, err
	}
	in := &instance{db: db, m: &metrics{}}
	var pr *position.Reader
	wst := core.Store(st)
	if _, ok := st.(positional); ok {
		lg := positionLog(st)
		if lg == nil {
			return nil, fmt.Errorf("%s has no position delivery", st.Table())
		}
		var err error
		if pr, err = position.New(position.Config{Log: lg, Store: st, DB: db, Logger: slog.New(slog.DiscardHandler)}); err != nil {
			return nil, err
		}
		wst = pr.Store()
	}
	// Silent: the benchmarks measure the library, not its warnings on
	// stderr (W2's bursts overflow the hot queue on purpose).
	quiet := slog.New(slog.DiscardHandler)
	dcfg := dispatch.Config{
		Store: wst, DB: db, Registry: reg, Metrics: in.m, Logger: quiet,
		Workers: cfg.workers, HotQueueSize: cfg.hotQueue, ColdQueueSize: cfg.coldQueue,
	}
	cfg.applyDispatch(&dcfg)
	d, err := dispatch.New(dcfg)
	if err != nil {
		return nil, err
	}
	p, err := poller.New(poller.Config{Store: st, DB: db, Handler: d, Metrics: in.m, Logger: quiet,
		BatchSize: cfg.pollBatch, MaxBatchSize: cfg.pollMaxBatch, Interval: cfg.pollInterval, BusyInterval: cfg.busyInterval, NoWatch: cfg.noWake})
	if err != nil {
		return nil, err
	}
	var hook core.WriterHook = d.WriterHook()
	if pr != nil {
		pr.SetHandler(d)
		hook = pr.Hook(d.WriterHook())
	}
	w, err := core.NewWriter(core.WriterConfig{Store: wst, Hook: hook, NoNotify: cfg.noWake, Logger: quiet})
	if err != nil {
		return nil, err
	}
	txm, err := txctx.New(db, txctx.Config{})
	if err != nil {
		return nil, err
	}
	in.d, in.p, in.w, in.do, in.r = d, p, w, txm.Do, pr
	if err := d.Start(ctx); err != nil {
		return nil, err
	}
	if pr != nil {
		if err := pr.Start(ctx); err != nil {
			_ = d.Close(context.WithoutCancel(ctx))
			return nil, err
		}
	}
	if err := p.Start(ctx); err != nil {
		_ = d.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return in, nil
}

// release closes the instance's pools; close it first.
func (in *instance) release() {
	_ = in.db.Close()
	if in.pool != nil {
		in.pool.Close()
	}
}

// close stops the poller, then the dispatcher.
func (in *instance) close(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	perr := in.p.Close(ctx)
	if in.r != nil {
		_ = in.r.Close(ctx)
	}
	derr := in.d.Close(ctx)
	if in.r != nil {
		_ = in.r.Flush(ctx)
	}
	if perr != nil {
		return perr
	}
	return derr
}

// table is a fresh outbox table, dropped by drop.
type table struct {
	st store.SchemaManager
	tg *target
	db *sql.DB
}

func newTable(ctx context.Context, tg *target, db *sql.DB, kind string) (*table, error) {
	return newOrderedTable(ctx, tg, db, kind, nil)
}

// newOrderedTable is newTable with a store that orders o's aggregate types.
func newOrderedTable(ctx context.Context, tg *target, db *sql.DB, kind string, o core.Ordering) (*table, error) {
	st, err := tg.newStore(uniqueName(kind), o)
	if err != nil {
		return nil, err
	}
	if err := st.CreateSchema(ctx, db); err != nil {
		return nil, err
	}
	return &table{st: st, tg: tg, db: db}, nil
}

func (t *table) drop(ctx context.Context) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if err := testdb.DropTable(c, t.db, t.st); err != nil {
		fmt.Fprintf(os.Stderr, "bench: drop %s: %v\n", t.st.Table(), err)
	}
}

// pendingLeft reports whether any row of the table is still NEW or RETRY.
func (t *table) pendingLeft(ctx context.Context) (bool, error) {
	var one int
	err := t.db.QueryRowContext(ctx, "SELECT 1 FROM "+t.st.Table()+" WHERE "+t.tg.pending+" LIMIT 1").Scan(&one)
	if err == sql.ErrNoRows {
		return false, nil
	}
	return err == nil, err
}

// waitDone waits until every event has reached the listener and no row is
// pending any more, and returns when that was seen.
func (t *table) waitDone(ctx context.Context, r *recorder, timeout time.Duration) (time.Time, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	select {
	case <-r.all:
	case <-deadline.C:
		return time.Time{}, fmt.Errorf("timed out after %s: %d of %d events delivered", timeout, r.delivered.Load(), r.n)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		left, err := t.pendingLeft(ctx)
		if err != nil {
			return time.Time{}, fmt.Errorf("count pending rows: %w", err)
		}
		if !left {
			return time.Now(), nil
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return time.Time{}, fmt.Errorf("timed out after %s: all events delivered, rows still pending", timeout)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// sampler records the delivery rate every interval and prints it.
type sampler struct {
	stop  chan struct{}
	done  chan struct{}
	rates []float64
}

func startSampler(label string, every time.Duration, count func() int64) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() { // owned: stop waits on done
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		start := time.Now()
		last, lastAt := count(), start
		for {
			select {
			case <-s.stop:
				return
			case now := <-t.C:
				c := count()
				rate := float64(c-last) / now.Sub(lastAt).Seconds()
				s.rates = append(s.rates, rate)
				fmt.Printf("    %-34s %3.0fs: %8.0f events/s (%d so far)\n", label, now.Sub(start).Seconds(), rate, c)
				last, lastAt = c, now
			}
		}
	}()
	return s
}

func (s *sampler) finish() []float64 {
	close(s.stop)
	<-s.done
	return s.rates
}

// resetPeakRSS returns memory to the OS and resets the kernel's peak RSS
// mark of this process, so that peakRSS then reports the peak of what follows.
func resetPeakRSS() {
	runtime.GC()
	debug.FreeOSMemory()
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// peakRSS returns the peak resident set size in bytes since resetPeakRSS
// (VmHWM), or 0 where /proc is missing.
func peakRSS() int64 { return procStatusBytes("VmHWM:") }

// procStatusBytes returns the size in bytes that the line of /proc/self/status
// starting with key gives in kB, or 0 where /proc or the line is missing.
func procStatusBytes(key string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// cpuTime returns the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
