package reliability

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/reliability/internal/chaos"
)

// proc is a helper process (reliability/internal/chaosnode) the test
// supervises. Its stdout lines are collected; it is killed and reaped when
// the test ends if it is still running.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr syncBuffer
	exited chan struct{} // closed once Wait has returned
	err    error         // Wait's result, set before exited is closed
	owner  string        // a worker's lease owner token, from its ready line

	mu      sync.Mutex
	lines   []string
	changed chan struct{}
}

// syncBuffer is a bytes.Buffer safe for the writes of exec's copying
// goroutine and the reads of the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startBinary(t, helperBinary(t), name, args...)
}

// startBinary starts the helper binary bin as the process name.
func startBinary(t *testing.T, bin, name string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), exited: make(chan struct{}), changed: make(chan struct{})}
	p.cmd.Stderr = &p.stderr
	stdin, err := p.cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.stdin = stdin
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { // owned through p.exited, which the cleanup below waits for
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.kill()
		<-p.exited
	})
	return p
}

// kill SIGKILLs the process unless it has exited.
func (p *proc) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
	}
}

// line waits for a stdout line starting with prefix and returns it.
func (p *proc) line(t *testing.T, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		for _, l := range p.lines {
			if strings.HasPrefix(l, prefix) {
				p.mu.Unlock()
				return l
			}
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-p.exited:
			p.mu.Lock()
			lines := p.lines
			p.mu.Unlock()
			for _, l := range lines {
				if strings.HasPrefix(l, prefix) {
					return l
				}
			}
			t.Fatalf("%s exited (%v) without printing %q; stderr:\n%s", p.name, p.err, prefix, p.stderr.String())
		case <-deadline.C:
			t.Fatalf("%s printed no %q within %s; stderr:\n%s", p.name, prefix, timeout, p.stderr.String())
		}
	}
}

// stop asks the process to shut down cleanly and waits for it.
func (p *proc) stop(t *testing.T, timeout time.Duration) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.kill()
		<-p.exited
		t.Errorf("%s did not stop within %s of SIGTERM; stderr:\n%s", p.name, timeout, p.stderr.String())
		return
	}
	if p.err != nil {
		t.Errorf("%s: %v; stderr:\n%s", p.name, p.err, p.stderr.String())
	}
	checkRaces(t, p)
}

// checkRaces fails the test if the race detector (helper built with -race)
// reported anything in p.
func checkRaces(t *testing.T, p *proc) {
	t.Helper()
	if out := p.stderr.String(); strings.Contains(out, "WARNING: DATA RACE") {
		t.Errorf("%s: data race:\n%s", p.name, out)
	}
}

// crashRun is one crash scenario on one database.
type crashRun struct {
	dialect, dsn string
	db           *sql.DB // the test's own pool, for checks
	outbox       string
	deliveries   chaos.Deliveries
	workersPer   int // dispatcher workers per process
	lease        time.Duration
	work         time.Duration // listener time per event
	coldQueue    int           // small enough that no event waits in it for a lease
	position     bool          // outbox.DeliveryPosition
	delivery     string        // "claim" or "position", for the logs
}

// flags returns the chaosnode flags of the run's delivery.
func (r *crashRun) flags() []string {
	if r.position {
		return []string{"-position"}
	}
	return nil
}

func (r *crashRun) startWorker(t *testing.T, n int) *proc {
	t.Helper()
	args := append([]string{"-role", "worker", "-dialect", r.dialect, "-dsn", r.dsn,
		"-table", r.outbox, "-deliveries", r.deliveries.Table(), "-workers", fmt.Sprint(r.workersPer),
		"-lease", r.lease.String(), "-interval", "100ms", "-cold", fmt.Sprint(r.coldQueue), "-work", r.work.String(), "-v"}, r.flags()...)
	p := startProc(t, fmt.Sprintf("worker-%d", n), args...)
	ready := p.line(t, "ready ", time.Minute)
	p.owner = strings.TrimPrefix(ready, "ready ")
	return p
}

// TestCrash: three worker processes and one writer process on one database;
// a supervisor SIGKILLs a random worker every ~2 s and restarts it. Every
// event must end DONE, delivered at least once (the listener records each
// delivery in the database, in its own transaction), and every duplicate
// must be classified: a delivery in flight at a kill (made by the killed
// process, its outcome not written) that another process made again after
// the kill. The test logs, per kill, the duplicates it caused and the
// recovery time: from the kill until every event the killed process held was
// delivered by another.
//
// In position delivery (TestCrash/<database>/position) the workers are
// outbox.Outbox instances with SingleActive, one of which reads the position
// and delivers, and the writer writes STREAM rows; the supervisor kills the
// worker that delivered last (the active one, mostly), which holds no
// leases: its events in flight, and those it delivered since it last saved
// its position, are delivered again by the next active worker, and
// chaos.Classify attributes those duplicates to the kill as in the claim
// path. SQLite has no relay lock: one worker (SingleNode) is killed and
// restarted, and reads on from its saved position. The recovery logged is
// from the kill until another process delivered again.
func TestCrash(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql", "sqlite"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			for _, dv := range deliveries {
				t.Run(dv.name, func(t *testing.T) {
					t.Parallel()
					testCrash(t, dialect, dv)
				})
			}
		})
	}
}

func testCrash(t *testing.T, dialect string, dv delivery) {
	// The listener works 15 ms per event, so the twelve workers are
	// busy about a third of the time and a kill finds events in flight.
	// The lease is set, not left to the default, so that the recovery
	// time measured is the lease timeout's and stays comparable when
	// the default changes.
	r := &crashRun{dialect: dialect, workersPer: 4, lease: 5 * time.Second, work: 15 * time.Millisecond, coldQueue: 100,
		position: dv.position, delivery: dv.name}
	events, rate := cfg.crashEvents, cfg.crashRate
	switch dialect {
	case "sqlite":
		// Four processes share one file and its single writer lock.
		// Each process has one connection and they share one write
		// lock: a few hundred events a second in all, so a short
		// cold queue keeps queued events well within their lease.
		events, rate, r.work, r.coldQueue = events/3, rate/3, 2*time.Millisecond, 20
		r.dsn = filepath.Join(t.TempDir(), "crash.db")
		db, err := chaos.Open("sqlite", r.dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		st, err := chaos.NewStore("sqlite", testdb.UniqueName("crash"))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.CreateSchema(context.Background(), db); err != nil {
			t.Fatal(err)
		}
		r.db, r.outbox = db, st.Table()
	default:
		tg := testdb.Open(t, dialect)
		env := testdb.PostgresEnv
		if dialect == "mysql" {
			env = testdb.MySQLEnv
		}
		r.dsn, r.db, r.outbox = os.Getenv(env), tg.DB, tg.Table
	}
	runCrash(t, r, events, rate)
}

func runCrash(t *testing.T, r *crashRun, events int, rate float64) {
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

	start := time.Now()
	workers := make([]*proc, 3)
	if r.position && r.dialect == "sqlite" {
		workers = workers[:1] // SingleNode: one reader of the position
	}
	var all []*proc // every worker process, killed or not
	for i := range workers {
		workers[i] = r.startWorker(t, len(all))
		all = append(all, workers[i])
	}
	writer := startProc(t, "writer", append([]string{"-role", "writer", "-dialect", r.dialect, "-dsn", r.dsn, "-table", r.outbox,
		"-events", fmt.Sprint(events), "-rate", fmt.Sprint(rate), "-concurrency", "4", "-per-tx", "5"}, r.flags()...)...)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	jitter := func() time.Duration {
		return time.Duration(float64(cfg.crashKillEvery) * (0.5 + rng.Float64()))
	}
	var kills []chaos.Kill
	timer := time.NewTimer(jitter())
	defer timer.Stop()
	writerExited := writer.exited
	for writerExited != nil || len(kills) < cfg.crashMinKills {
		select {
		case <-writerExited:
			writerExited = nil // a nil channel never fires again
		case <-timer.C:
			i := rng.IntN(len(workers))
			if r.position {
				// The worker delivering now: the active one.
				last, err := r.deliveries.LastDeliverer(ctx, r.db)
				if err != nil {
					t.Fatal(err)
				}
				for j, w := range workers {
					if w.owner == last {
						i = j
					}
				}
			}
			victim := workers[i]
			// Kill while the victim holds events (for up to a second), so
			// that kills test recovery rather than land between polls.
			busy := time.Now().Add(time.Second)
			for time.Now().Before(busy) {
				held, err := chaos.LeasedIDs(ctx, r.db, r.dialect, r.outbox, victim.owner)
				if err != nil {
					t.Fatal(err)
				}
				if len(held) > 0 || r.position {
					break // position delivery leases only the retries
				}
				time.Sleep(5 * time.Millisecond) // polling a database condition, which cannot signal
			}
			victim.kill()
			<-victim.exited
			// Taken once the process is reaped: every delivery it recorded
			// committed before this instant.
			at := time.Now()
			checkRaces(t, victim)
			// What the dead worker held is exactly what it had claimed and
			// not finished: the only events it can have delivered without
			// recording the outcome. Its leases change no more until they
			// expire, except by a last write-back the server was still
			// applying when the process died (chaos.Classify counts those
			// events as settled).
			held, err := chaos.LeasedIDs(ctx, r.db, r.dialect, r.outbox, victim.owner)
			if err != nil {
				t.Fatal(err)
			}
			kills = append(kills, chaos.Kill{Owner: victim.owner, At: at, Held: held})
			workers[i] = r.startWorker(t, len(all))
			all = append(all, workers[i])
			timer.Reset(jitter())
		}
	}
	checkRaces(t, writer)
	writeLine := writer.line(t, "written=", time.Second)
	if writer.err != nil {
		t.Fatalf("writer: %v; stderr:\n%s", writer.err, writer.stderr.String())
	}
	var written, retries, ambiguous int
	if _, err := fmt.Sscanf(writeLine, "written=%d retries=%d ambiguous=%d", &written, &retries, &ambiguous); err != nil {
		t.Fatalf("writer output %q: %v", writeLine, err)
	}
	if written != events {
		t.Fatalf("writer wrote %d events, want %d", written, events)
	}
	writeTime := time.Since(start)

	done := core.StatusDone
	if r.position {
		done = core.StatusStream // delivered STREAM rows stay STREAM
	}
	waitUntil(t, 3*time.Minute, 200*time.Millisecond, fmt.Sprintf("%d events delivered", events), func() (bool, error) {
		if r.position {
			lost, err := r.deliveries.Lost(ctx, r.db, r.outbox)
			return err == nil && lost == 0, err
		}
		c, err := chaos.StatusCounts(ctx, r.db, r.outbox)
		return err == nil && c[done] == events, err
	})
	total := time.Since(start)
	for _, w := range workers {
		w.stop(t, time.Minute)
	}

	counts, err := chaos.StatusCounts(ctx, r.db, r.outbox)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := r.deliveries.All(ctx, r.db)
	if err != nil {
		t.Fatal(err)
	}
	sum := chaos.Summarize(ds)
	lost, err := r.deliveries.Lost(ctx, r.db, r.outbox)
	if err != nil {
		t.Fatal(err)
	}
	strays, err := r.deliveries.Strays(ctx, r.db, r.outbox)
	if err != nil {
		t.Fatal(err)
	}
	// What the workers logged (warnings and errors only).
	var fenced, failed int
	var samples []string
	for _, p := range all {
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			switch {
			case !strings.Contains(l, "write-back"):
				continue
			case strings.Contains(l, "fenced"):
				fenced++
			case strings.Contains(l, "failed"):
				failed++
			default:
				continue
			}
			if len(samples) < 5 {
				samples = append(samples, l)
			}
		}
	}
	cl := chaos.Classify(ds, kills)
	heldAtKills, settled := 0, 0
	var recoveries []time.Duration
	for i, k := range cl.Kills {
		heldAtKills += len(k.Held)
		recovery := "nothing to recover"
		if len(k.Held) > len(k.Settled)+len(k.Rekilled) {
			recoveries = append(recoveries, k.Recovery)
			recovery = "recovered in " + ms(k.Recovery)
		}
		settled += len(k.Settled)
		t.Logf("kill %d at +%s: held %d (%d settled by its last write-backs, %d held again at a later kill), %d duplicates, %s", i+1,
			k.At.Sub(start).Round(time.Millisecond), len(k.Held), len(k.Settled), len(k.Rekilled), k.Duplicates, recovery)
	}
	t.Logf("crash %s %s (%s): %d events in %s (written in %s), %d kills, %d events held by the killed workers (%d settled by their last write-backs), "+
		"%d lost, %d duplicated events (%d extra deliveries: %d in flight at a kill, %d unexplained; %.1f per kill), "+
		"recovery after a kill p50 %s max %s (lease %s), write-backs fenced %d, failed %d, writer retries %d (ambiguous commits %d)",
		r.dialect, r.delivery, cfg.name, events, total.Round(100*time.Millisecond), writeTime.Round(100*time.Millisecond),
		len(kills), heldAtKills, settled, lost, sum.Duplicated, sum.Extra(), cl.Explained, len(cl.Unexplained),
		float64(cl.Explained)/float64(max(len(kills), 1)), ms(percentile(recoveries, 50)), ms(percentile(recoveries, 100)),
		r.lease, fenced, failed, retries, ambiguous)

	if r.position {
		// No leases to recover: how long until another process delivered.
		var resumed []time.Duration
		for _, k := range kills {
			var first time.Time
			for _, d := range ds {
				if d.Owner != k.Owner && !d.Started.Before(k.At) && (first.IsZero() || d.Started.Before(first)) {
					first = d.Started
				}
			}
			if !first.IsZero() {
				resumed = append(resumed, first.Sub(k.At))
			}
		}
		t.Logf("crash %s position: delivery resumed after a kill p50 %s max %s", r.dialect,
			ms(percentile(resumed, 50)), ms(percentile(resumed, 100)))
	}
	if counts[done] != events || len(counts) != 1 {
		t.Errorf("rows by status %v, want %d %v and nothing else", counts, events, done)
	}
	if lost != 0 || sum.Events != events || strays != 0 {
		t.Errorf("%d events lost, %d delivered of %d, %d stray deliveries", lost, sum.Events, events, strays)
	}
	if len(kills) < cfg.crashMinKills {
		t.Errorf("only %d kills, want at least %d", len(kills), cfg.crashMinKills)
	}
	// Every duplicate must be a delivery in flight at a kill (see
	// chaos.Classify). Anything else is a second delivery among live
	// processes, which the outbox must not cause.
	if n := len(cl.Unexplained); n > 0 {
		killedAt := map[string]time.Time{}
		for _, k := range kills {
			killedAt[k.Owner] = k.At
		}
		var b strings.Builder
		for _, d := range cl.Unexplained[:min(n, 10)] {
			fmt.Fprintf(&b, "\n  %s:", d.EventID)
			for _, e := range ds {
				if e.EventID == d.EventID {
					fmt.Fprintf(&b, " [%s +%s..+%s", e.Owner, e.Started.Sub(start).Round(time.Millisecond),
						e.Finished.Sub(start).Round(time.Millisecond))
					if at, ok := killedAt[e.Owner]; ok {
						fmt.Fprintf(&b, ", killed +%s", at.Sub(start).Round(time.Millisecond))
					}
					b.WriteString("]")
				}
			}
		}
		t.Errorf("%d unexplained duplicate deliveries (not in flight at a kill); first deliveries of the events:%s\nworker logs:\n%s",
			n, b.String(), strings.Join(samples, "\n"))
	}
}
