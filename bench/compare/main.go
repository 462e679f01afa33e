// Command compare runs the same two workloads against the other Go
// outboxes and this library, on the same servers in the same run, and
// prints one table per run:
//
//	go run ./bench/compare                          # small sizes, a few minutes on 2 cores
//	go run ./bench/compare -w1-events 20000 -w2-events 100000 -json compare.json
//
// W1: -writers goroutines commit -w1-events business transactions, each
// inserting one business row and one ~200-byte event, with the contender's
// consumers running; events/s from the first write to the last event's
// first delivery, and commit-to-consumer latency p50/p99 timed from the
// writer's COMMIT returning (a delivery before that counts as 0). W2:
// -w2-events events written as a backlog, then the consumers start; events/s
// to the last first-delivery. Duplicates are second deliveries of an event,
// counted until -grace after the last event arrived. Ratios are to the
// hand-written SQL outbox of the same server in the same run.
//
// Servers come from OUTBOX_POSTGRES_DSN and OUTBOX_MYSQL_DSN (make
// bench-compare sets both to the local servers); every contender runs on
// its own uniquely named tables (River on a schema of its own), dropped at
// the end. This is its own module so that River and watermill never enter
// the outbox module's dependencies.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/internal/procstat"
	"github.com/outboxkit/outbox/pgxtx"
)

// config is the command line.
type config struct {
	dbs       string
	only      string
	w1Events  int
	w2Events  int
	writers   int
	consumers int
	claim     int
	poll      time.Duration
	riverWork int
	timeout   time.Duration
	grace     time.Duration
	jsonOut   string
	cpuProf   string
	rounds    int
}

func parseFlags(args []string) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.StringVar(&c.dbs, "db", "postgres,mysql", "servers to run on, of postgres and mysql (each needs its DSN variable)")
	fs.StringVar(&c.only, "only", "", "run only the contenders whose name contains one of these comma-separated words")
	fs.IntVar(&c.w1Events, "w1-events", 3000, "W1 business transactions per contender (the issue's size: 20000)")
	fs.IntVar(&c.w2Events, "w2-events", 20000, "W2 backlog per contender (the issue's size: 100000)")
	fs.IntVar(&c.writers, "writers", 16, "W1 writer goroutines")
	fs.IntVar(&c.consumers, "hand-consumers", 4, "consumers of the hand-written SQL outbox")
	fs.IntVar(&c.claim, "hand-claim", 100, "rows per claim of the hand-written SQL outbox")
	fs.DurationVar(&c.poll, "poll", 10*time.Millisecond, "poll interval of the polling contenders (hand-written SQL when idle, River's FetchPollInterval, watermill's PollInterval)")
	fs.IntVar(&c.riverWork, "river-workers", 100, "River's MaxWorkers of the queue")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "give up on a contender's run after this long and report what is missing")
	fs.DurationVar(&c.grace, "grace", 300*time.Millisecond, "keep consumers running this long after the last event to count late duplicates")
	fs.IntVar(&c.rounds, "rounds", 1, "run every contender this many times, in an order rotated each round, and report the median (and the range) of each figure")
	fs.StringVar(&c.jsonOut, "json", "", "also write the results to this JSON file")
	fs.StringVar(&c.cpuProf, "w1-cpuprofile", "", "write a CPU profile of this process during each contender's W1 (writes and deliveries) to this directory, one file per server and contender (and round, after the first)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if c.w1Events < 1 || c.w2Events < 1 || c.writers < 1 || c.consumers < 1 || c.claim < 1 || c.riverWork < 1 || c.rounds < 1 {
		return nil, fmt.Errorf("-w1-events, -w2-events, -writers, -hand-consumers, -hand-claim, -river-workers and -rounds must be at least 1")
	}
	if c.poll <= 0 || c.timeout <= 0 || c.grace < 0 {
		return nil, fmt.Errorf("-poll and -timeout must be positive, -grace not negative")
	}
	return c, nil
}

// kinds are the contenders, in the table's order; the hand-written SQL
// outbox must stay second (the ratios are to it).
func kinds(c *config) []*kind {
	return []*kind{
		{name: "business transaction alone (no outbox)", settings: "the business row only", noW2: true, noConsum: true,
			make: func(*config) contender { return &bizOnly{} }},
		{name: "hand-written SQL", settings: fmt.Sprintf("%d consumers, each a READ COMMITTED transaction: SELECT %d pending rows in key order FOR UPDATE SKIP LOCKED, one UPDATE marks them done, deliver, COMMIT; a deadlock retries; %s sleep when empty", c.consumers, c.claim, c.poll),
			make: func(c *config) contender { return &handSQL{consumers: c.consumers, claim: c.claim, poll: c.poll} }},
		{name: "River, fast polling", pgOnly: true, settings: fmt.Sprintf("River %s, InsertTx in the business transaction, MaxWorkers %d, FetchCooldown 1ms (its minimum), FetchPollInterval %s, LISTEN/NOTIFY on (its default)", riverVersion, c.riverWork, c.poll),
			make: func(c *config) contender { return &riverQ{maxWorkers: c.riverWork, poll: c.poll} }},
		{name: "watermill-sql, fast polling", settings: fmt.Sprintf("watermill-sql %s, Publisher on the business transaction, one Subscriber (consumer group), default schema and offsets adapters, PollInterval %s", watermillSQLVersion, c.poll),
			make: func(c *config) contender { return &wm{poll: c.poll} }},
		{name: "this library, defaults", settings: "outbox.New at defaults (SingleNode), events written in Do",
			make: func(*config) contender { return &ours{instances: 1} }},
		{name: "this library, position delivery", settings: "outbox.New at defaults with Delivery: outbox.DeliveryPosition (SingleNode)",
			make: func(*config) contender { return &ours{instances: 1, delivery: outbox.DeliveryPosition} }},
		{name: "this library, 8 workers, poller batch 500", settings: "Dispatch.Workers 8, Poller.BatchSize 500",
			make: func(*config) contender { return &ours{instances: 1, workers: 8, batch: 500} }},
		{name: "business transaction alone on pgx (no outbox)", pgOnly: true, settings: "the business row only, in pgx's Pool.Begin and Commit", noW2: true, noConsum: true,
			make: func(*config) contender { return &bizPgx{} }},
		{name: "watermill-sql on pgx, fast polling", pgOnly: true, settings: fmt.Sprintf("as watermill-sql above, on pgx pools: the Publisher on the pgx transaction (TxFromPgx), the Subscriber on BeginnerFromPgx, PollInterval %s", c.poll),
			make: func(c *config) contender { return &wm{poll: c.poll, pgx: true} }},
		{name: "this library on pgx, defaults", pgOnly: true, settings: "outbox.New at defaults on stdlib.OpenDBFromPool, events written in pgxtx's Do on the same pgxpool",
			make: func(*config) contender { return &ours{instances: 1, pgx: true} }},
		{name: "this library on pgx, position delivery", pgOnly: true, settings: "as the line above, with Delivery: outbox.DeliveryPosition",
			make: func(*config) contender { return &ours{instances: 1, pgx: true, delivery: outbox.DeliveryPosition} }},
		{name: "this library on pgx, writes sent at Write", pgOnly: true, settings: "this library on pgx at defaults but pgxtx.Config.HoldWrites: pgxtx.HoldNone: the event's INSERT goes to the server when Write is called, not with COMMIT",
			make: func(*config) contender { return &ours{instances: 1, pgx: true, hold: pgxtx.HoldNone} }},
		{name: "this library, two instances (defaults each)", settings: "two MultiNode instances on one table, each its own pool; writers alternate",
			make: func(*config) contender { return &ours{instances: 2} }},
	}
}

// Versions of the contenders, printed with their settings (kept in step
// with go.mod).
const (
	riverVersion        = "v0.42.0"
	watermillSQLVersion = "v4.1.2"
)

// notRun are contenders the issue names that this module cannot build.
var notRun = []string{"oagudo/outbox: not run: the Go module proxy reachable here refuses github.com/oagudo/outbox (403), so it cannot be a dependency of this module"}

func servers(list string) ([]*server, []string) {
	var out []*server
	var notes []string
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		env := map[string]string{"postgres": "OUTBOX_POSTGRES_DSN", "mysql": "OUTBOX_MYSQL_DSN"}[name]
		if env == "" {
			notes = append(notes, fmt.Sprintf("unknown server %q (postgres or mysql)", name))
			continue
		}
		if dsn := os.Getenv(env); dsn != "" {
			if name == "postgres" {
				dsn = withAppName(dsn)
			}
			out = append(out, &server{name: name, dsn: dsn})
		} else {
			notes = append(notes, fmt.Sprintf("%s skipped: %s is not set", name, env))
		}
	}
	return out, notes
}

func main() {
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func selected(c *config, k *kind) bool {
	if c.only == "" || strings.HasPrefix(k.name, "hand-written") {
		return true
	}
	for w := range strings.SplitSeq(c.only, ",") {
		if w = strings.TrimSpace(w); w != "" && strings.Contains(strings.ToLower(k.name), strings.ToLower(w)) {
			return true
		}
	}
	return false
}

func run(ctx context.Context, c *config) error {
	srvs, notes := servers(c.dbs)
	for _, n := range notes {
		fmt.Println("note:", n)
	}
	if len(srvs) == 0 {
		return fmt.Errorf("no server to run on: set OUTBOX_POSTGRES_DSN and/or OUTBOX_MYSQL_DSN (make bench-compare sets both)")
	}
	host, _ := os.Hostname()
	fmt.Printf("compare: %s, %d CPUs, GOMAXPROCS %d, %s, load average %s\n", host, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), procstat.LoadAvg())
	fmt.Printf("W1: %d writers x %d business transactions in all; W2: %d pre-written events\n", c.writers, c.w1Events, c.w2Events)
	ks := kinds(c)
	var all []outcome
	for _, srv := range srvs {
		if srv.pg() {
			admin, err := srv.open(1)
			if err != nil {
				return err
			}
			defer admin.Close()
			srv.admin = admin
		}
		var sel []*kind
		for _, k := range ks {
			if selected(c, k) && (!k.pgOnly || srv.pg()) {
				sel = append(sel, k)
			}
		}
		var rounds []outcome
		for r := range c.rounds {
			// Each round starts one contender later, so that no
			// contender always runs first, or right after another.
			order := append(slices.Clone(sel[r%len(sel):]), sel[:r%len(sel)]...)
			outs, err := runRound(ctx, c, srv, order, r)
			if err != nil {
				return err
			}
			ratios(outs)
			rounds = append(rounds, outs...)
		}
		all = append(all, rounds...)
	}
	printTable(os.Stdout, c, ks, medians(all), srvs)
	if c.jsonOut != "" {
		b, err := json.MarshalIndent(struct {
			Load    string    `json:"load_average_after"`
			CPUs    int       `json:"cpus"`
			Config  string    `json:"config"`
			Results []outcome `json:"results"`
		}{procstat.LoadAvg(), runtime.NumCPU(), strings.Join(os.Args[1:], " "), all}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(c.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runRound runs W1 and W2 of each contender of ks on srv, in that order.
func runRound(ctx context.Context, c *config, srv *server, ks []*kind, round int) ([]outcome, error) {
	var outs []outcome
	for _, k := range ks {
		o := outcome{Contender: k.name, DB: srv.name, Round: round + 1}
		// phase runs one workload: its failure is the outcome's, unless
		// ctx ended, which ends the run.
		phase := func(name string, run func(context.Context, *config, *server, *kind, *outcome) error, failed *string) error {
			fmt.Printf("[%s] round %d, %s: %s ...\n", srv.name, round+1, k.name, name)
			if err := run(ctx, c, srv, k, &o); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				*failed = err.Error()
				fmt.Printf("    %s failed: %v\n", name, err)
			}
			return nil
		}
		if err := phase("W1", runW1, &o.W1Error); err != nil {
			return nil, err
		}
		if !k.noW2 {
			if err := phase("W2", runW2, &o.W2Error); err != nil {
				return nil, err
			}
		}
		outs = append(outs, o)
	}
	return outs, nil
}

// ratios divides each contender's rates by the hand-written SQL's of the
// same server.
func ratios(outs []outcome) {
	var hand *outcome
	for i := range outs {
		if strings.HasPrefix(outs[i].Contender, "hand-written") {
			hand = &outs[i]
		}
	}
	if hand == nil {
		return
	}
	for i := range outs {
		if hand.W1PerSec > 0 {
			outs[i].W1Ratio = outs[i].W1PerSec / hand.W1PerSec
		}
		if hand.W2PerSec > 0 {
			outs[i].W2Ratio = outs[i].W2PerSec / hand.W2PerSec
		}
	}
}
