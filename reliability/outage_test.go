package reliability

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/reliability/internal/chaos"
)

// proxied is a pool on a real server that goes through a tcpProxy, so that
// the test can cut, refuse and kill its connections, and only its own.
type proxied struct {
	dialect string
	proxy   *tcpProxy
	db      *sql.DB // through the proxy
	direct  *sql.DB // straight to the server, for the test's own SQL
	appName string  // PostgreSQL application_name of the proxied sessions
}

// openProxied opens a pool of at most maxConns connections on tg's server
// through a new proxy.
func openProxied(t *testing.T, tg testdb.Target, maxConns int) *proxied {
	t.Helper()
	px := &proxied{dialect: tg.Name, direct: tg.DB, appName: tg.Table}
	var dsn string
	switch tg.Name {
	case "postgres":
		u, err := url.Parse(os.Getenv(testdb.PostgresEnv))
		if err != nil {
			t.Fatal(err)
		}
		px.proxy = newProxy(t, u.Host, false)
		u.Host = px.proxy.Addr()
		q := u.Query()
		q.Set("application_name", px.appName)
		q.Set("connect_timeout", "5")
		u.RawQuery = q.Encode()
		dsn = u.String()
	case "mysql":
		c, err := mysqldrv.ParseDSN(os.Getenv(testdb.MySQLEnv))
		if err != nil {
			t.Fatal(err)
		}
		px.proxy = newProxy(t, c.Addr, true)
		c.Addr = px.proxy.Addr()
		c.Timeout = 5 * time.Second
		dsn = c.FormatDSN()
	default:
		t.Fatalf("no server to proxy for %s", tg.Name)
	}
	db, err := chaos.Open(tg.Name, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { _ = db.Close() })
	px.db = db
	return px
}

// killSessions terminates, on the server, every session of the proxied pool,
// as an administrator or a failover would; the proxy itself stays up. It
// returns how many sessions it ended.
func (px *proxied) killSessions(t *testing.T) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	switch px.dialect {
	case "postgres":
		var n int
		err := px.direct.QueryRowContext(ctx, "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity "+
			"WHERE application_name = $1 AND pid <> pg_backend_pid()", px.appName).Scan(&n)
		if err != nil {
			t.Fatalf("terminate sessions: %v", err)
		}
		return n
	default:
		// The thread ids the server announced on the proxy's own
		// connections: listing sessions by client port instead could kill
		// another test's session that reused a port just freed.
		n := 0
		for _, id := range px.proxy.ThreadIDs() {
			// A session may end on its own meanwhile: "Unknown thread id".
			if _, err := px.direct.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id)); err == nil {
				n++
			}
		}
		return n
	}
}

// outageWriter writes events one business transaction at a time from
// several goroutines, at a given rate, retrying each failed transaction with
// the same event ids as an application would.
type outageWriter struct {
	ids                         []string
	written, retries, ambiguous atomic.Int64
	err                         atomic.Pointer[error]
}

func (ow *outageWriter) run(n *testnode.Node, envs []core.Envelope, rate float64, goroutines int) {
	var wg sync.WaitGroup
	var next atomic.Int64
	start := time.Now()
	for range goroutines {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(envs) {
					return
				}
				if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
					time.Sleep(d) // pacing: event i is due at start + i/rate
				}
				r, amb, err := chaos.WriteWithRetry(n.TxManager, n.Writer, envs[i:i+1])
				ow.retries.Add(int64(r))
				if amb {
					ow.ambiguous.Add(1)
				}
				if err != nil {
					ow.err.CompareAndSwap(nil, &err)
					return
				}
				ow.written.Add(1)
			}
		})
	}
	wg.Wait()
}

func chaosEnvs(t *testing.T, count int, headers func(i int) map[string]string) ([]core.Envelope, []string) {
	t.Helper()
	envs := make([]core.Envelope, count)
	ids := make([]string, count)
	for i := range envs {
		spec := core.EnvelopeSpec{Type: chaos.EventType, AggregateType: chaos.Aggregate,
			AggregateID: strconv.Itoa(i), JSON: fmt.Appendf(nil, `{"n":%d}`, i)}
		if headers != nil {
			spec.Headers = headers(i)
		}
		env, err := core.NewEnvelope(spec)
		if err != nil {
			t.Fatal(err)
		}
		envs[i], ids[i] = env, env.ID()
	}
	return envs, ids
}

// TestOutage: one instance writes and delivers on a pool whose connections
// the test takes away mid-run, alternately by a refusing outage (the proxy
// cuts every connection and refuses new ones for a while, as a server that
// goes down) and by killing the sessions on the server. Writers see errors
// and retry; the dispatcher and poller (in position delivery, the position
// reader too) must recover by themselves, without a restart, and every event
// must be delivered.
func TestOutage(t *testing.T) {
	t.Parallel()
	forEachDialectDelivery(t, []string{"postgres", "mysql"}, func(t *testing.T, tg testdb.Target, dv delivery) {
		runOutage(t, tg, dv, outagePlan{
			name: "outage", events: cfg.outageEvents, rate: cfg.outageRate,
			lease: 2 * time.Second, outages: cfg.outages, down: cfg.outageDown, killSessions: true,
		})
	})
}

// TestOutageLongerThanLease: the database is gone for longer than the
// instance's lease (every connection cut, new ones refused, 5 s against a
// 2 s lease), while events are written and delivered, as a database restart
// or a failover would do. Every lease the instance held expires during the
// outage, and its in-flight write-backs fail; once the database is back,
// every event must still be delivered. In the claim path duplicates are
// reported, not failed on: a delivery whose DONE could not be written is
// delivered again. In position delivery a delivered event's outcome is not
// written at all and the reader keeps its position in memory through the
// outage, so nothing but the events failed on purpose may be delivered
// twice; only the retries (RETRY rows, claimed) hold leases that expire.
func TestOutageLongerThanLease(t *testing.T) {
	t.Parallel()
	forEachDialectDelivery(t, []string{"postgres", "mysql"}, func(t *testing.T, tg testdb.Target, dv delivery) {
		runOutage(t, tg, dv, outagePlan{
			name: "outage longer than the lease", events: cfg.longOutageEvents, rate: cfg.outageRate,
			lease: 2 * time.Second, outages: cfg.longOutages, down: 5 * time.Second,
			// Long enough that the outage finds deliveries in flight, whose
			// outcomes cannot be written until it ends.
			work: 10 * time.Millisecond,
		})
	})
}

// outagePlan is one outage scenario.
type outagePlan struct {
	name         string
	events       int
	rate         float64 // events written per second
	lease        time.Duration
	outages      int
	down         time.Duration // how long a refusing outage lasts
	killSessions bool          // alternate refusing outages with killed sessions
	work         time.Duration // listener time per event
}

func runOutage(t *testing.T, tg testdb.Target, dv delivery, plan outagePlan) {
	px := openProxied(t, tg, 8)
	log := testnode.NewDeliveryLog()
	reg := core.NewRegistry()
	// One event in twenty fails its first delivery, so that retries
	// (write-back, wake-up, claim) run through the outages too.
	if err := reg.RegisterFunc(chaos.Aggregate, chaos.EventType, func(_ context.Context, ev core.Event) error {
		if plan.work > 0 {
			time.Sleep(plan.work) // the business work of the listener
		}
		if _, transient := ev.Header("transient"); log.Record(ev.ID()) == 1 && transient {
			return errors.New("transient failure")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	n := startDeliveryNode(t, dv, tg.Store, px.db, reg, testnode.Options{
		Dispatch: func(c *dispatch.Config) { c.StoreTimeout = 3 * time.Second },
		Poller:   func(c *poller.Config) { c.LeaseTimeout = plan.lease },
	})
	envs, ids := chaosEnvs(t, plan.events, func(i int) map[string]string {
		if i%20 == 7 {
			return map[string]string{"transient": "1"}
		}
		return nil
	})
	ow := &outageWriter{}
	start := time.Now()
	writing := make(chan struct{})
	go func() { // owned: the test waits on writing below
		defer close(writing)
		ow.run(n.Node, envs, plan.rate, 4)
	}()

	writeTime := time.Duration(float64(len(envs)) / plan.rate * float64(time.Second))
	gap := writeTime / time.Duration(plan.outages+1)
	var refusing, killed, cut, expired int
	for i := range plan.outages {
		select {
		case <-time.After(gap):
		case <-writing:
		}
		if i%2 == 0 || !plan.killSessions {
			px.proxy.SetRefusing(true)
			cut += px.proxy.Cut()
			time.Sleep(plan.down) // the server is down this long
			if plan.down > plan.lease {
				// Leases the instance could not renew, release or settle
				// while it was cut off: they expired during the outage.
				n, err := chaos.ExpiredLeases(context.Background(), tg.DB, tg.Name, tg.Table, time.Now().Add(-plan.lease))
				if err != nil {
					t.Fatal(err)
				}
				expired += n
			}
			px.proxy.SetRefusing(false)
			refusing++
		} else {
			killed += px.killSessions(t)
		}
	}
	<-writing
	if perr := ow.err.Load(); perr != nil {
		t.Fatalf("writer gave up: %v", *perr)
	}
	// Events failed on purpose are delivered twice by design. In position
	// delivery their rows go RETRY, then DONE through the claim path; the
	// others stay STREAM.
	transient := map[string]bool{}
	for _, env := range envs {
		if _, ok := env.Header("transient"); ok {
			transient[env.ID()] = true
		}
	}
	want := map[core.Status]int{core.StatusDone: len(ids)}
	if dv.position {
		want = map[core.Status]int{core.StatusDone: len(transient), core.StatusStream: len(ids) - len(transient)}
	}
	log.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d events delivered", len(ids)), testnode.AllDelivered(ids))
	// A RETRY write that failed in an outage is retried with the
	// dispatcher's backoff (up to 10 s), then claimed: under -race on a
	// loaded machine the last rows took over a minute to settle.
	waitUntil(t, 2*time.Minute, 100*time.Millisecond, fmt.Sprintf("rows by status %v", want), func() (bool, error) {
		c, err := chaos.StatusCounts(context.Background(), tg.DB, tg.Table)
		if err == nil && !maps.Equal(c, want) {
			err = fmt.Errorf("rows by status %v", c) // shown if this times out
		}
		return err == nil, err
	})
	total := time.Since(start)
	n.Close(t)

	dupEvents, extra := log.DuplicatesBeyond(func(id string) int {
		if transient[id] {
			return 2
		}
		return 1
	})
	t.Logf("%s %s %s (%s): %d events in %s, lease %s, %d outages (%d refusing %s with %d connections cut and %d leases expired, %d with %d sessions killed), "+
		"0 lost, %d duplicated events (%d extra deliveries), writer retries %d (ambiguous commits %d), %s, refused connection attempts %d",
		plan.name, tg.Name, dv.name, cfg.name, len(ids), total.Round(100*time.Millisecond), plan.lease, plan.outages, refusing, plan.down, cut, expired,
		plan.outages-refusing, killed, dupEvents, extra, ow.retries.Load(), ow.ambiguous.Load(), n.Metrics, px.proxy.refused.Load())
	if got := ow.written.Load(); got != int64(len(ids)) {
		t.Errorf("written %d of %d", got, len(ids))
	}
	if c := testnode.StatusCounts(t, tg.DB, tg.Table); !maps.Equal(c, want) {
		t.Errorf("rows by status %v, want %v", c, want)
	}
	if dv.position && dupEvents > 0 {
		t.Errorf("%d events delivered more often than their failures explain (%d extra deliveries); no process was killed", dupEvents, extra)
	}
	if d := log.Distinct(); d != len(ids) {
		t.Errorf("%d distinct events delivered, want %d", d, len(ids))
	}
	if ow.retries.Load() == 0 {
		t.Errorf("no write failed: the outages did not happen")
	}
}

// TestOutageStalledConnections: the network stops carrying the pool's open
// connections without closing them (a partition without resets, a dead
// load balancer, a frozen server); new connections work. Events that only a
// poller delivers must still be delivered: the poller must not wait for ever
// on a claim sent over a stalled connection.
//
// Known bug: Poller.poll runs Store.Claim on a context without a deadline,
// so the claim waits for ever (Linux gives up on a half-open connection
// after about 15 minutes of retransmissions, and not at all while the peer
// still acknowledges), and with it every retry, overflow and crash recovery
// of the instance; Poller.Close would wait for ever too. Poller.ClaimTimeout
// bounds each claim, as the dispatcher bounds its write-backs with
// StoreTimeout.
//
// In position delivery the events are STREAM rows written without a hot
// path, which only the position reader delivers: its reads must not wait
// for ever either.
func TestOutageStalledConnections(t *testing.T) {
	t.Parallel()
	forEachDialectDelivery(t, []string{"postgres", "mysql"}, func(t *testing.T, tg testdb.Target, dv delivery) {
		px := openProxied(t, tg, 4)
		log := testnode.NewDeliveryLog()
		reg := core.NewRegistry()
		if err := reg.RegisterFunc(chaos.Aggregate, chaos.EventType, func(_ context.Context, ev core.Event) error {
			log.Record(ev.ID())
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		n := startDeliveryNode(t, dv, tg.Store, px.db, reg, testnode.Options{
			Dispatch: func(c *dispatch.Config) { c.StoreTimeout = 5 * time.Second },
			Poller: func(c *poller.Config) {
				c.LeaseTimeout = 3 * time.Second
				c.ClaimTimeout = 2 * time.Second
			},
		})
		// Runs before the node's cleanup: a claim stuck on a stalled
		// connection would otherwise keep Close waiting for ever.
		t.Cleanup(func() { px.proxy.Cut() })
		before, beforeIDs := chaosEnvs(t, 10, nil)
		writeWithoutHotPath(t, dv, tg, before...)
		log.WaitFor(t, 30*time.Second, "the events written before the stall", testnode.AllDelivered(beforeIDs))
		// Let every write-back finish: the pool is idle when the stall hits.
		waitWrittenBack(t, dv, tg, len(beforeIDs))

		stalled := px.proxy.Stall()
		after, afterIDs := chaosEnvs(t, 10, nil)
		writeWithoutHotPath(t, dv, tg, after...)
		start := time.Now()
		log.WaitFor(t, time.Minute, "the events written after the stall", testnode.AllDelivered(afterIDs))
		t.Logf("stall %s %s: %d connections stalled; the poller (position: the reader) delivered the next events after %s", tg.Name, dv.name, stalled, time.Since(start).Round(time.Millisecond))
		// The outcomes are written (position delivery: the position saved)
		// before the cut, or the node's Close would fail to write them.
		waitWrittenBack(t, dv, tg, len(beforeIDs)+len(afterIDs))
		px.proxy.Cut() // lets the node's Close finish
		n.Close(t)
	})
}

// waitWrittenBack waits until the outcomes of the done deliveries are in
// tg's table: done rows DONE in the claim path; in position delivery, where
// nothing is written after a delivery, the position saved past every row
// (the reader saves it once per cycle, which ends after the handing).
func waitWrittenBack(t *testing.T, dv delivery, tg testdb.Target, done int) {
	t.Helper()
	if dv.position {
		waitUntil(t, 30*time.Second, 20*time.Millisecond, "the position saved past the delivered events", func() (bool, error) {
			n, err := streamAboveFloor(tg)
			return err == nil && n == 0, err
		})
		return
	}
	waitUntil(t, 30*time.Second, 20*time.Millisecond, fmt.Sprintf("%d events DONE", done), func() (bool, error) {
		c, err := chaos.StatusCounts(context.Background(), tg.DB, tg.Table)
		return err == nil && c[core.StatusDone] == done, err
	})
}

// writeWithoutHotPath commits envs in a plain *sql.Tx on tg's pool, with no
// after-commit hook, as dv writes them (deliveryWriter): only a poller, or
// the position reader, can deliver them. It fails the test on error.
func writeWithoutHotPath(t *testing.T, dv delivery, tg testdb.Target, envs ...core.Envelope) {
	t.Helper()
	tx, err := tg.DB.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deliveryWriter(t, dv, tg).WriteAllTx(context.Background(), tx, envs); err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// streamAboveFloor counts the STREAM rows of tg above its persisted floor:
// those the position reader has not yet saved as delivered.
func streamAboveFloor(tg testdb.Target) (int64, error) {
	in, ok := core.StoreAs[core.Inspector](tg.Store)
	if !ok {
		return 0, errors.New("the store has no Stats")
	}
	st, err := in.Stats(context.Background(), tg.DB)
	return st.Stream, err
}
