// Command bench measures what the outbox costs and how close it runs to the
// database's own ceiling, on SQLite and, when their DSN variables are set, on
// PostgreSQL (OUTBOX_POSTGRES_DSN) and MySQL/MariaDB (OUTBOX_MYSQL_DSN).
//
//	go run ./bench                       # every database configured, W1-W3
//	go run ./bench -db postgres -w w2 -w2-events 1000000
//	go run ./bench -json bench.json
//
// Workloads, each against a raw-SQL baseline measured in the same run:
//
//   - W1 live: -writers goroutines commit -w1-events business transactions,
//     each inserting one business row and one ~200-byte JSON event through
//     core.Writer, with a dispatcher and a poller running and a no-op
//     listener. It reports events/s from the first commit until every row is
//     DONE in the database, commit-to-listener latency (p50, p99, max) and
//     duplicates. Baselines: the same writers inserting the business row
//     only (the floor), and the business row plus a raw outbox INSERT.
//   - W2 backlog: -w2-events pending rows are already in the table when a
//     dispatcher and a poller start; it reports the drain rate every -every,
//     events/s until every row is DONE, duplicates and the process's peak
//     RSS. Baseline: one loop that claims -raw-batch rows with the store's
//     claim statement and marks them DONE in one UPDATE.
//   - W3: W1 and W2 with two dispatcher+poller instances, each on its own
//     pool, on one table; compared with one instance of the same run.
//   - W4 cross-instance wake-up (only with -w w4): -w4-events events, each
//     in a transaction of its own at -w4-rate events/s, written where no hot
//     path delivers them (WriteTx on a plain *sql.Tx in one of three
//     instances; then a WriterOnly process and two instances). It reports
//     commit-to-listener latency, duplicates, the writers' transaction time
//     and the claims/s of the idle instances afterwards. -no-wake compares
//     it without NOTIFY/LISTEN.
//   - W5 ordered keys across two processes: the bench starts itself twice
//     more as outbox processes that write -w5-tx business transactions
//     (1 to 3 events of one of -w5-keys aggregates, numbered by the
//     aggregate's counter row, which the transaction locks) and deliver
//     them with 10% listener failures; the aggregate type ordered per key,
//     against the same transactions unordered. It reports transactions/s,
//     duplicates, lost events, order violations, the DONE writes' durations
//     and where an event's DONE waits (see w5.go; make bench-ordered).
//   - Partitions (only with -w part, PostgreSQL): W1 and W2 on a plain
//     table and on a partitioned one (postgres.Config.Partitions, with
//     -part-ahead + 1 time partitions of -part-interval), each with its raw
//     baselines, then the purge of -part-purge-events old DONE rows, twice
//     on each: row by row on the plain table, one partition dropped on the
//     partitioned one. -partitioned runs every other workload on
//     partitioned tables.
//   - Soak (only with -w soak; make soak): -soak-events events through W1
//     (one instance delivering while the writers write), then a backlog of
//     as many drained by one instance, with a line every -soak-every: rates,
//     backlog, resident memory, and the claim, DONE-batch and (W1) delivery
//     latencies of that window; a summary compares the first window with
//     the last.
//
// Every table a run creates has a unique name and is dropped at the end.
// Benchmarks are never part of go test.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/procstat"
	"github.com/outboxkit/outbox/poller"
)

// config is the command line.
type config struct {
	dbs, workloads  string
	orderedKeys     []int // W1: also run ordered over each of these key counts
	pgx             bool  // PostgreSQL W1 and W2: also run on pgx (pgxtx, pgxpool)
	rawDone         bool  // W1: also run the raw INSERT with raw DONE batches (always on SQLite)
	position        bool  // W1, W2: also run position delivery (PostgreSQL, MariaDB, SQLite)
	w1Only          string
	w1Events        int
	rounds          int
	writers         int
	w2Events        int
	workers         int
	hotQueue        int
	coldQueue       int
	pollBatch       int
	pollMaxBatch    int
	pollInterval    time.Duration
	doneBatch       int
	doneLinger      time.Duration
	noYield         bool
	deleteDone      bool
	rawBatch        int
	conns           int
	every           time.Duration
	timeout         time.Duration
	jsonOut         string
	cpuProfile      string
	memProfile      string
	fillfactor      int
	noAutovacuum    bool
	noRaw           bool
	vacuumEvery     time.Duration
	busyInterval    time.Duration
	noWake          bool
	w4Events        int
	soakEvents      int
	soakEvery       time.Duration
	soakPerTx       int
	listenerDelay   time.Duration
	w4Rate          int
	w4Writers       int
	w4Idle          time.Duration
	w4Settle        time.Duration
	partitioned     bool
	partInterval    time.Duration
	partAhead       int
	partPurgeEvents int
	w5Txs           int
	w5Keys          int
	w5Rounds        int
	w5Writers       int
	w5Fail          float64
	w5Hot           float64
	w5Sample        time.Duration
	w5Profile       string
	w5Trace         bool
	w5NoCounter     bool
	w5Analyze       time.Duration
}

// poolSize returns the connections of one instance's pool.
func (c *config) poolSize(instances int) int {
	if c.conns > 0 {
		return c.conns
	}
	return (c.writers+instances-1)/instances + c.workers + 4
}

// applyDispatch sets the dispatcher options the flags control.
func (c *config) applyDispatch(d *dispatch.Config) {
	d.DoneBatchSize = c.doneBatch
	d.DoneBatchLinger = c.doneLinger
	d.NoYieldAfterCommit = c.noYield
	d.DeleteDelivered = c.deleteDone
}

func main() {
	if js := os.Getenv(w5ChildEnv); js != "" {
		if err := runW5Child(js); err != nil {
			fmt.Fprintln(os.Stderr, "bench W5 child:", err)
			os.Exit(1)
		}
		return
	}
	var c config
	flag.StringVar(&c.dbs, "db", "sqlite,postgres,mysql", "databases, comma-separated (servers without their DSN variable are skipped)")
	flag.StringVar(&c.workloads, "w", "w1,w2,w3,w5", "workloads, comma-separated: w1, w2, w3, w4, w5, soak, part")
	flag.IntVar(&c.w5Txs, "w5-tx", 3000, "W5: business transactions a run, both processes together")
	flag.IntVar(&c.w5Keys, "w5-keys", 200, "W5: keys (aggregates) the transactions write to")
	flag.IntVar(&c.w5Rounds, "w5-rounds", 2, "W5: rounds of the ordered run and its unordered baseline on each database, alternated")
	flag.IntVar(&c.w5Writers, "w5-writers", 8, "W5: concurrent writers in each of the two processes")
	flag.Float64Var(&c.w5Fail, "w5-fail", 0.1, "W5: share of listener calls that fail")
	flag.Float64Var(&c.w5Hot, "w5-hot", 0.8, "W5: share of transactions written through the hot path (the rest through WriteTx on a plain *sql.Tx)")
	flag.DurationVar(&c.w5Sample, "w5-sample", 0, "W5: sample the database's sessions of the ordered runs this often (pg_stat_activity and pg_blocking_pids; INNODB_LOCK_WAITS and PROCESSLIST) and print what they did (0: off)")
	flag.BoolVar(&c.w5Trace, "w5-trace", false, "W5 on PostgreSQL and MySQL: time every statement of every transaction of both processes, and the client's time between them, and print them by kind of transaction")
	flag.BoolVar(&c.w5NoCounter, "w5-no-counter", false, "W5: the transactions write their events without locking and adding to their aggregate's counter (order is then checked against the store's seq, in the ordered runs only)")
	flag.DurationVar(&c.w5Analyze, "w5-analyze", 0, "W5: ANALYZE the outbox and key tables this often during a run, as autovacuum would (0: never; a server with autovacuum off then plans on tables without statistics)")
	flag.StringVar(&c.w5Profile, "w5-profile", "", "W5: each process writes CPU, block and mutex profiles to files named with this prefix")
	flag.IntVar(&c.soakEvents, "soak-events", 10000000, "soak: events through W1, then as many through W2")
	flag.DurationVar(&c.soakEvery, "soak-every", time.Minute, "soak: reporting window")
	flag.DurationVar(&c.listenerDelay, "listener-delay", 0, "W2/W3: each listener call waits this long, as a call over the network would (0: returns at once)")
	flag.IntVar(&c.soakPerTx, "soak-per-tx", 1, "soak W1: events per business transaction (W1's shape is 1; more lets 10M events through in minutes, not hours)")
	flag.IntVar(&c.w1Events, "w1-events", 60000, "W1: business transactions (one event each)")
	flag.IntVar(&c.rounds, "rounds", 3, "W1: alternate the raw baseline and the outbox runs in this many rounds")
	flag.IntVar(&c.writers, "writers", 16, "W1: concurrent writers")
	orderedKeys := flag.String("ordered-keys", "1000,10", "W1: also run with ordering on over these numbers of keys, comma-separated (\"\": none)")
	flag.BoolVar(&c.pgx, "pgx", true, "PostgreSQL W1 and W2: also run an instance on pgx (writes in pgxtx transactions, background side on the same pgxpool)")
	flag.StringVar(&c.w1Only, "w1-only", "", "W1: run only the rows whose name starts with this (\"business\", \"raw INSERT\", \"outbox\"), and no floor (to measure one row alone, e.g. under perf stat; the ratios are then to the first row run)")
	flag.BoolVar(&c.position, "position", false, "W1 and W2 on PostgreSQL, MariaDB and SQLite: also run the outbox in position delivery (outbox.DeliveryPosition), beside the claim path")
	flag.BoolVar(&c.rawDone, "raw-done", false, "W1: also run the raw INSERT with a marker setting the rows DONE in batches like the dispatcher's (always on SQLite, where one connection writes)")
	flag.IntVar(&c.w2Events, "w2-events", 100000, "W2: pending rows in the backlog (1000000 for the memory check)")
	large := flag.Bool("large", false, "W2 with 1,000,000 pending rows (same as -w2-events 1000000)")
	flag.IntVar(&c.workers, "workers", dispatch.DefaultWorkers, "dispatcher workers")
	flag.IntVar(&c.hotQueue, "hot-queue", dispatch.DefaultHotQueueSize, "dispatcher hot queue size")
	flag.IntVar(&c.coldQueue, "cold-queue", dispatch.DefaultColdQueueSize, "dispatcher cold queue size")
	flag.IntVar(&c.pollBatch, "poll-batch", 0, "poller BatchSize, the claim size without a backlog (0: the default, 100)")
	flag.IntVar(&c.pollMaxBatch, "poll-max-batch", 0, "poller MaxBatchSize, the cap of claims that grow with a backlog (0: the default, 500 without -poll-batch, else -poll-batch)")
	flag.DurationVar(&c.pollInterval, "poll-interval", poller.DefaultInterval, "poller interval")
	flag.DurationVar(&c.busyInterval, "busy-interval", poller.DefaultBusyInterval, "poller BusyInterval (adaptive poll; = -poll-interval turns it off)")
	flag.BoolVar(&c.noWake, "no-wake", false, "writers send no NOTIFY (WriterConfig.NoNotify) and pollers do not LISTEN (poller NoWatch)")
	flag.IntVar(&c.w4Events, "w4-events", 10000, "W4: events written without a hot path, one per transaction")
	flag.IntVar(&c.w4Rate, "w4-rate", 1000, "W4: events per second the writers write")
	flag.IntVar(&c.w4Writers, "w4-writers", 16, "W4: concurrent writers (each waits for its event's time)")
	flag.DurationVar(&c.w4Idle, "w4-idle", 20*time.Second, "W4: window over which the idle claims/s are counted (0: skip)")
	flag.DurationVar(&c.w4Settle, "w4-settle", poller.DefaultBusyFor+time.Second, "W4: wait after the last delivery before the idle window (past the busy period)")
	flag.IntVar(&c.doneBatch, "done-batch", dispatch.DefaultDoneBatchSize, "dispatcher DONE batch size (1 = one statement per event)")
	flag.DurationVar(&c.doneLinger, "done-linger", dispatch.DefaultDoneBatchLinger, "dispatcher DONE batch linger")
	flag.BoolVar(&c.deleteDone, "delete-delivered", false, "dispatcher DeleteDelivered: delete delivered rows instead of marking them DONE")
	flag.BoolVar(&c.noYield, "no-yield", false, "dispatcher NoYieldAfterCommit: the writer hook does not yield after queuing events")
	flag.IntVar(&c.rawBatch, "raw-batch", 100, "W2 baseline: rows per claim")
	flag.IntVar(&c.conns, "conns", 0, "connections per pool (default: writers per instance + workers + 4; SQLite always 1)")
	flag.DurationVar(&c.every, "every", 5*time.Second, "W2: drain rate reporting interval")
	flag.DurationVar(&c.timeout, "timeout", 5*time.Minute, "give up on a run after this long")
	flag.StringVar(&c.jsonOut, "json", "", "also write the results as JSON to this file")
	flag.BoolVar(&c.noAutovacuum, "no-autovacuum", false, "W2 on PostgreSQL: turn autovacuum off for the drained tables (ALTER TABLE ... SET (autovacuum_enabled = false))")
	flag.BoolVar(&c.noRaw, "no-raw", false, "W2: drain with one outbox instance only, no raw baseline (the long drain: see make bench-drain)")
	flag.IntVar(&c.fillfactor, "fillfactor", 0, "W2 on PostgreSQL: the outbox tables' fillfactor (0: the server default, 100)")
	flag.DurationVar(&c.vacuumEvery, "vacuum-every", 0, "W2 on PostgreSQL: VACUUM the outbox table this often during a drain (0: never; autovacuum as configured)")
	flag.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.BoolVar(&c.partitioned, "partitioned", false, "PostgreSQL: every workload on partitioned tables (postgres.Config.Partitions; see -part-interval, -part-ahead)")
	flag.DurationVar(&c.partInterval, "part-interval", 24*time.Hour, "partitioned tables: the span of one partition")
	flag.IntVar(&c.partAhead, "part-ahead", 29, "partitioned tables: partitions made ahead (a table has this many + 1 time partitions)")
	flag.IntVar(&c.partPurgeEvents, "part-purge-events", 200000, "part: old DONE rows the purge removes")
	flag.StringVar(&c.memProfile, "memprofile", "", "write the allocations of the whole run (go tool pprof -sample_index=alloc_objects) to this file")
	flag.Parse()
	for _, f := range strings.Split(*orderedKeys, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "bench: -ordered-keys: %q is not a positive number\n", f)
			os.Exit(2)
		}
		c.orderedKeys = append(c.orderedKeys, n)
	}
	if *large {
		c.w2Events = 1000000
	}
	if c.w5Txs < 2 || c.w5Keys < 1 || c.w5Rounds < 1 || c.w5Writers < 1 || c.w5Fail < 0 || c.w5Fail >= 1 || c.w5Hot < 0 || c.w5Hot > 1 {
		fmt.Fprintln(os.Stderr, "bench: -w5-tx must be at least 2, -w5-keys, -w5-rounds and -w5-writers positive, -w5-fail in [0, 1) and -w5-hot in [0, 1]")
		os.Exit(2)
	}
	if c.rounds < 1 || c.w1Events < c.rounds || c.writers < 1 || c.w2Events < 1 || c.w4Events < 1 || c.w4Rate < 1 || c.w4Writers < 1 || c.soakEvents < 1 || c.soakEvery <= 0 || c.soakPerTx < 1 || c.listenerDelay < 0 {
		fmt.Fprintln(os.Stderr, "bench: -rounds, -writers, -w1-events, -w2-events, -w4-events, -w4-rate and -w4-writers must be positive, and -w1-events at least -rounds")
		os.Exit(2)
	}
	if err := run(&c); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// report is everything a run prints, as JSON.
type report struct {
	Machine machine  `json:"machine"`
	Results []result `json:"results"`
}

type machine struct {
	Cores      int        `json:"cores"`
	GOMAXPROCS int        `json:"gomaxprocs"`
	GoVersion  string     `json:"go_version"`
	OS         string     `json:"os"`
	LoadStart  string     `json:"load_avg_start"`
	LoadEnd    string     `json:"load_avg_end"`
	Started    time.Time  `json:"started"`
	Seconds    float64    `json:"seconds"`
	Databases  []database `json:"databases"`
	Flags      string     `json:"flags"`
}

type database struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Settings []string `json:"settings"`
}

func run(c *config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if c.memProfile != "" {
		defer func() {
			if err := procstat.WriteAllocs(c.memProfile); err != nil {
				fmt.Fprintf(os.Stderr, "bench: -memprofile: %v\n", err)
			}
		}()
	}
	tgs, err := targets(c.dbs)
	if err != nil {
		return err
	}
	for _, tg := range tgs {
		if tg.cleanup != nil {
			defer tg.cleanup()
		}
	}
	wl := map[string]bool{}
	for w := range strings.SplitSeq(c.workloads, ",") {
		switch w = strings.TrimSpace(strings.ToLower(w)); w {
		case "w1", "w2", "w3", "w4", "w5", "soak", "part":
			wl[w] = true
		case "":
		default:
			return fmt.Errorf("unknown workload %q", w)
		}
	}
	var flags []string
	flag.VisitAll(func(f *flag.Flag) { flags = append(flags, "-"+f.Name+"="+f.Value.String()) })
	rep := report{Machine: machine{
		Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(),
		OS: runtime.GOOS + "/" + runtime.GOARCH, LoadStart: procstat.LoadAvg(), Started: time.Now(),
		Flags: strings.Join(flags, " "),
	}}
	fmt.Printf("outbox bench: %d cores (GOMAXPROCS %d), %s %s, load average %s\n",
		rep.Machine.Cores, rep.Machine.GOMAXPROCS, rep.Machine.GoVersion, rep.Machine.OS, rep.Machine.LoadStart)
	fmt.Printf("flags: %s\n", rep.Machine.Flags)
	reachable := tgs[:0]
	for _, tg := range tgs {
		db, err := tg.open(2)
		if err != nil {
			return fmt.Errorf("%s: %w", tg.name, err)
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = db.PingContext(pctx)
		cancel()
		if err != nil {
			// make bench passes the local servers' DSNs by default: a
			// machine without them runs SQLite alone.
			_ = db.Close()
			fmt.Printf("note: %s server unreachable (%v); skipping it\n", tg.name, err)
			continue
		}
		v, settings, err := tg.describe(ctx, db)
		_ = db.Close()
		if err != nil {
			return fmt.Errorf("%s: describe: %w", tg.name, err)
		}
		rep.Machine.Databases = append(rep.Machine.Databases, database{tg.name, v, settings})
		fmt.Printf("%-8s %s: %s\n", tg.name, v, strings.Join(settings, " "))
		reachable = append(reachable, tg)
	}
	tgs = reachable
	if c.partitioned {
		for i, tg := range tgs {
			if tg.name == "postgres" {
				tgs[i] = partitionedTarget(c, tg)
			}
		}
	}
	for _, tg := range tgs {
		if wl["w1"] || wl["w3"] {
			rs, err := runW1(ctx, c, tg, wl["w1"], wl["w3"])
			if err != nil {
				return fmt.Errorf("%s W1: %w", tg.name, err)
			}
			rep.Results = append(rep.Results, rs...)
		}
		if wl["w2"] || wl["w3"] {
			rs, err := runW2(ctx, c, tg, wl["w2"], wl["w3"])
			if err != nil {
				return fmt.Errorf("%s W2: %w", tg.name, err)
			}
			rep.Results = append(rep.Results, rs...)
		}
		if wl["w4"] {
			rs, err := runW4(ctx, c, tg)
			if err != nil {
				return fmt.Errorf("%s W4: %w", tg.name, err)
			}
			rep.Results = append(rep.Results, rs...)
		}
		if wl["part"] {
			rs, err := runPartition(ctx, c, tg)
			if err != nil {
				return fmt.Errorf("%s partitions: %w", tg.name, err)
			}
			rep.Results = append(rep.Results, rs...)
		}
		if wl["soak"] {
			rs, err := runSoak(ctx, c, tg)
			if err != nil {
				return fmt.Errorf("%s soak: %w", tg.name, err)
			}
			rep.Results = append(rep.Results, rs...)
		}
	}
	if wl["w5"] {
		rs, err := runW5(ctx, c, tgs)
		if err != nil {
			return err
		}
		rep.Results = append(rep.Results, rs...)
	}
	rep.Machine.LoadEnd = procstat.LoadAvg()
	rep.Machine.Seconds = time.Since(rep.Machine.Started).Seconds()
	fmt.Printf("\ndone in %.0f s; load average at the end %s\n", rep.Machine.Seconds, rep.Machine.LoadEnd)
	if c.jsonOut != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(c.jsonOut, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}
