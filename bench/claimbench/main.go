// Command claimbench measures claim throughput of the SQL stores against a
// real server: for each claim strategy and number of concurrent claimers it
// fills a fresh table with a backlog of pending rows, then lets the claimers
// (each on its own pool, like separate processes) drain it, and prints rows
// per second, claims per second, and the server's deadlock and row-lock-wait
// counters over the run. It is not part of the test suite.
//
//	go run ./bench/claimbench -db mysql -rows 100000
//	go run ./bench/claimbench -db postgres -rows 100000
//
// With -mark (the default) every claimed row is also marked DONE by its
// claimer, one statement per row, as a dispatcher does. -mark=false leaves
// claimed rows leased: later claims then walk past every row claimed before
// (a lease keeps a row pending), so it measures the cost of in-flight rows,
// not a steady state. -rows 1000000 -drain 100000 claims from a backlog of a
// million rows.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
)

type variant struct {
	name  string
	store func(table string) (store.SchemaManager, error)
}

func main() {
	var (
		dbName    = flag.String("db", "mysql", "server: mysql or postgres")
		dsn       = flag.String("dsn", "", "DSN (default $OUTBOX_MYSQL_DSN or $OUTBOX_POSTGRES_DSN)")
		rows      = flag.Int("rows", 100000, "pending rows in the table at the start of each run")
		drain     = flag.Int("drain", 0, "stop after claiming this many rows (default: all of -rows)")
		history   = flag.Int("history", 0, "DONE rows already in the table before the run")
		batch     = flag.Int("batch", 100, "rows per claim")
		claimers  = flag.String("claimers", "1,4", "comma-separated numbers of concurrent claimers")
		strategy  = flag.String("strategy", "", "mysql claim strategies, comma-separated (default: all)")
		mark      = flag.Bool("mark", true, "mark every claimed row DONE, one statement per row")
		workersPC = flag.Int("conns", 4, "connections per claimer pool; with -mark, rows are marked by this many goroutines")
	)
	flag.Parse()
	if *drain <= 0 || *drain > *rows {
		*drain = *rows
	}
	if err := run(*dbName, *dsn, *rows, *drain, *history, *batch, *claimers, *strategy, *mark, *workersPC); err != nil {
		fmt.Fprintln(os.Stderr, "claimbench:", err)
		os.Exit(1)
	}
}

func run(dbName, dsn string, rows, drain, history, batch int, claimerList, strategies string, mark bool, conns int) error {
	var (
		open     func(string) (*sql.DB, error)
		variants []variant
		counters func(ctx context.Context, db *sql.DB) (deadlocks, lockWaits int64, err error)
	)
	switch dbName {
	case "mysql":
		if dsn == "" {
			dsn = os.Getenv("OUTBOX_MYSQL_DSN")
		}
		open = mysql.Open
		counters = mysqlCounters
		for _, c := range []mysql.ClaimStrategy{mysql.ClaimSkipLocked, mysql.ClaimUpdateLimit} {
			if strategies != "" && !strings.Contains(","+strategies+",", ","+c.String()+",") {
				continue
			}
			variants = append(variants, variant{c.String(), func(table string) (store.SchemaManager, error) {
				return mysql.New(mysql.Config{Table: table, Claim: c})
			}})
		}
	case "postgres":
		if dsn == "" {
			dsn = os.Getenv("OUTBOX_POSTGRES_DSN")
		}
		open = postgres.Open
		counters = postgresCounters
		variants = append(variants, variant{"skip-locked-returning", func(table string) (store.SchemaManager, error) {
			return postgres.New(postgres.Config{Table: table})
		}})
	default:
		return fmt.Errorf("unknown -db %q", dbName)
	}
	if dsn == "" {
		return errors.New("no DSN: pass -dsn or set OUTBOX_MYSQL_DSN / OUTBOX_POSTGRES_DSN")
	}
	var counts []int
	for _, f := range strings.Split(claimerList, ",") {
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n < 1 {
			return fmt.Errorf("bad -claimers %q", claimerList)
		}
		counts = append(counts, n)
	}
	admin, err := open(dsn)
	if err != nil {
		return err
	}
	defer admin.Close()
	ctx := context.Background()
	fmt.Printf("db=%s rows=%d drain=%d history=%d batch=%d mark=%v conns/claimer=%d\n", dbName, rows, drain, history, batch, mark, conns)
	fmt.Printf("%-22s %8s %10s %10s %12s %10s %10s %10s\n", "strategy", "claimers", "rows/s", "claims/s", "ms/claim", "seconds", "deadlocks", "lockwaits")
	for _, v := range variants {
		for _, n := range counts {
			r, err := runOne(ctx, admin, open, dsn, v, rows, drain, history, batch, n, mark, conns, counters)
			if err != nil {
				return fmt.Errorf("%s with %d claimers: %w", v.name, n, err)
			}
			fmt.Printf("%-22s %8d %10.0f %10.1f %12.2f %10.2f %10d %10d\n", v.name, n, float64(r.rows)/r.elapsed.Seconds(),
				float64(r.claims)/r.elapsed.Seconds(), r.claimTime.Seconds()*1000/float64(r.claims), r.elapsed.Seconds(), r.deadlocks, r.lockWaits)
		}
	}
	return nil
}

type result struct {
	rows, claims         int64
	claimTime            time.Duration // summed over all Claim calls
	elapsed              time.Duration
	deadlocks, lockWaits int64
}

func runOne(ctx context.Context, admin *sql.DB, open func(string) (*sql.DB, error), dsn string, v variant,
	rows, drain, history, batch, claimers int, mark bool, conns int,
	counters func(context.Context, *sql.DB) (int64, int64, error)) (result, error) {
	st, err := v.store(fmt.Sprintf("claimbench_%d", time.Now().UnixNano()))
	if err != nil {
		return result{}, err
	}
	if err := st.CreateSchema(ctx, admin); err != nil {
		return result{}, err
	}
	defer func() { _ = testdb.DropTable(context.WithoutCancel(ctx), admin, st) }()
	if err := fill(ctx, admin, st, history, rows); err != nil {
		return result{}, err
	}
	d0, w0, err := counters(ctx, admin)
	if err != nil {
		return result{}, err
	}
	var (
		claimed, claims atomic.Int64
		claimNanos      atomic.Int64
		wg              sync.WaitGroup
		errMu           sync.Mutex
		firstErr        error
	)
	fail := func(err error) {
		errMu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		errMu.Unlock()
	}
	pools := make([]*sql.DB, claimers)
	for i := range pools {
		if pools[i], err = open(dsn); err != nil {
			return result{}, err
		}
		pools[i].SetMaxOpenConns(conns)
		pools[i].SetMaxIdleConns(conns)
		defer pools[i].Close()
	}
	start := time.Now()
	for i, db := range pools {
		owner := fmt.Sprintf("bench-%d", i)
		wg.Go(func() {
			for claimed.Load() < int64(drain) {
				t0 := time.Now()
				evs, bad, err := st.Claim(ctx, db, core.ClaimParams{Owner: owner, Now: t0, LeaseTimeout: time.Hour, Limit: batch})
				if err != nil {
					fail(err)
					return
				}
				if len(evs)+len(bad) == 0 {
					return
				}
				claimNanos.Add(int64(time.Since(t0)))
				claims.Add(1)
				claimed.Add(int64(len(evs) + len(bad)))
				if mark {
					if err := markAll(ctx, st, db, owner, evs, conns); err != nil {
						fail(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return result{}, firstErr
	}
	if claimed.Load() < int64(drain) {
		return result{}, fmt.Errorf("claimed %d rows, want %d", claimed.Load(), drain)
	}
	d1, w1, err := counters(ctx, admin)
	if err != nil {
		return result{}, err
	}
	return result{rows: claimed.Load(), claims: claims.Load(), claimTime: time.Duration(claimNanos.Load()),
		elapsed: elapsed, deadlocks: d1 - d0, lockWaits: w1 - w0}, nil
}

// markAll marks evs DONE with up to workers concurrent statements.
func markAll(ctx context.Context, st store.SchemaManager, db *sql.DB, owner string, evs []core.Event, workers int) error {
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(evs); i += workers {
				ok, err := st.MarkDone(ctx, db, owner, evs[i].ID(), time.Now())
				if err == nil && !ok {
					err = fmt.Errorf("mark done %s: lease lost", evs[i].ID())
				}
				if err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fill inserts history DONE rows, then n pending ones after them.
func fill(ctx context.Context, db *sql.DB, st store.SchemaManager, history, n int) error {
	start := time.Now().Add(-24 * time.Hour)
	payload := []byte(`{"order":"o-1","amount":4200,"currency":"EUR"}`)
	const chunk = 1000
	insert := func(prefix string, from, count int) error {
		envs := make([]core.Envelope, 0, chunk)
		for i := from; i < from+count; i++ {
			e, err := core.NewEnvelope(core.EnvelopeSpec{ID: fmt.Sprintf("%s-%09d", prefix, i), Type: core.EventName("OrderPlaced"),
				OccurredAt: start.Add(time.Duration(i) * time.Millisecond), JSON: payload})
			if err != nil {
				return err
			}
			envs = append(envs, e)
			if len(envs) == chunk || i == from+count-1 {
				if err := st.Insert(ctx, db, envs, core.InsertOptions{}); err != nil {
					return err
				}
				envs = envs[:0]
			}
		}
		return nil
	}
	if err := insert("h", 0, history); err != nil {
		return err
	}
	if history > 0 {
		q := "UPDATE " + st.Table() + " SET status = 1, done_at = created_at WHERE event_id LIKE 'h-%'"
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("mark history done: %w", err)
		}
	}
	return insert("p", history, n)
}

func mysqlCounters(ctx context.Context, db *sql.DB) (deadlocks, lockWaits int64, err error) {
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_deadlocks', 'Innodb_row_lock_waits')")
	if err != nil {
		return 0, 0, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return 0, 0, err
		}
		if name == "Innodb_deadlocks" {
			deadlocks = v
		} else {
			lockWaits = v
		}
	}
	return deadlocks, lockWaits, rows.Err()
}

func postgresCounters(ctx context.Context, db *sql.DB) (deadlocks, lockWaits int64, err error) {
	err = db.QueryRowContext(ctx, "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").Scan(&deadlocks)
	return deadlocks, 0, err
}
