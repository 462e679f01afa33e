package reliability

import (
	"context"
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
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/reliability/internal/chaos"
)

// killRun is what one run of TestCrashOrderedKills measured.
type killRun struct {
	events, kills       int
	duplicates          int // deliveries beyond one per event
	explained           int // duplicates a kill explains (see chaos.Classify)
	lost, violations    int
	doneWrites          []time.Duration // the DONE writes of delivered batches
	heldWrites          []time.Duration // ordered: the writes that waited for held key rows
	gaps                []time.Duration // delivery finished .. kill, per explained duplicate
	took, writing       time.Duration
	unexplained, failed int // unexplained duplicates; DONE writes that failed
}

func (r killRun) perKill() float64 { return float64(r.duplicates) / float64(max(r.kills, 1)) }

// TestCrashOrderedKills: what SIGKILLs cost ordered delivery, beside the
// same run unordered. Three worker processes deliver and write at once, each
// through its own hot path: every business transaction adds 1 to 3 to the
// counter of one of the run's keys (a row it locks until COMMIT) and writes
// as many events of that key numbered by it, so that per key the commit
// order is fixed by the application, not by the outbox. A random worker is
// SIGKILLed every ~2 s (1 to 3 s) and restarted, writing too until the table
// holds the run's events. The run is made twice on each database, with the
// aggregate type ordered per key and without, and each logs: events, kills,
// duplicate deliveries and duplicates per kill, lost events, order
// violations (successful listener calls of a key out of its numbering, from
// the deliveries table's times; expected without ordering, where they are
// only counted), the DONE batch writes' p50/p99/max (MarkDoneOrderedNoWait,
// and apart the MarkDoneOrdered calls for the events whose key rows it found
// held, or MarkDoneBatch unordered, timed inside the workers) and how long before
// its kill a duplicated event's first delivery had finished. Lost events
// fail either run; order violations fail the ordered one; so do duplicates
// that no kill explains.
//
// It is a long run only (OUTBOX_CHAOS=long: make chaos, make chaos-ordered;
// 20,000 events over 200 keys each), measured rather than checked in CI:
// TestCrashOrdered covers ordered delivery under kills in the short mode.
func TestCrashOrderedKills(t *testing.T) {
	if cfg.killsEvents == 0 {
		t.Skipf("a long run: set %s=long (make chaos-ordered)", modeEnv)
	}
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			runs := map[bool]killRun{}
			// Every run follows the one before, the databases' too: a run
			// beside another database's starves both servers of CPU on a
			// small machine, and the ordered run of one database would
			// overlap the other's runs while its unordered run ran alone.
			for _, ordered := range []bool{true, false} {
				name := map[bool]string{true: "ordered", false: "unordered"}[ordered]
				t.Run(name, func(t *testing.T) {
					runs[ordered] = runOrderedKills(t, dialect, ordered)
				})
			}
			o, u := runs[true], runs[false]
			if o.kills == 0 || u.kills == 0 {
				return
			}
			ratio := "n/a (no unordered duplicate)"
			if u.perKill() > 0 {
				ratio = strconv.FormatFloat(o.perKill()/u.perKill(), 'f', 2, 64) + "x"
			}
			t.Logf("ordered kills %s (%s): duplicates per kill ordered %.1f, unordered %.1f: %s; DONE write p99 ordered %s, unordered %s",
				dialect, cfg.name, o.perKill(), u.perKill(), ratio, ms(percentile(o.doneWrites, 99)), ms(percentile(u.doneWrites, 99)))
		})
	}
}

func runOrderedKills(t *testing.T, dialect string, ordered bool) killRun {
	ctx := context.Background()
	tg := testdb.Open(t, dialect)
	// Without -race even in the long mode: the run times the DONE writes,
	// and the race detector would slow the workers' side of every
	// transaction several times over. Built before the run's clock starts.
	bin := buildHelperRace(t, "chaosnode", false)
	env := testdb.PostgresEnv
	if dialect == "mysql" {
		env = testdb.MySQLEnv
	}
	dsn := os.Getenv(env)
	deliveries, err := chaos.NewDeliveries(dialect, testdb.UniqueName("deliv"))
	if err != nil {
		t.Fatal(err)
	}
	counters, err := chaos.NewCounters(dialect, testdb.UniqueName("counters"))
	if err != nil {
		t.Fatal(err)
	}
	if err := deliveries.Create(ctx, tg.DB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		if err := deliveries.Drop(ctx, tg.DB); err != nil {
			t.Error(err)
		}
		if err := counters.Drop(ctx, tg.DB); err != nil {
			t.Error(err)
		}
	})
	if err := counters.Create(ctx, tg.DB, cfg.killsKeys); err != nil {
		t.Fatal(err)
	}

	const procs = 3
	writing := true
	wrote := make([]bool, procs)
	var all []*proc // every worker process started, killed or not
	start := func(slot int) *proc {
		args := []string{"-role", "worker", "-dialect", dialect, "-dsn", dsn, "-table", tg.Table,
			"-deliveries", deliveries.Table(), "-workers", "4", "-lease", cfg.killsLease.String(), "-interval", "100ms",
			"-cold", "100", "-work", "5ms", "-max-attempts", "1000", "-time-done", "-v"}
		if ordered {
			args = append(args, "-ordered")
		}
		if writing {
			args = append(args, "-write", "-events", "0", "-rate", fmt.Sprint(cfg.killsRate/procs), "-concurrency", "4",
				"-keys", fmt.Sprint(cfg.killsKeys), "-counters", counters.Table())
		}
		wrote[slot] = writing
		p := startBinary(t, bin, fmt.Sprintf("worker-%d", len(all)), args...)
		p.owner = strings.TrimPrefix(p.line(t, "ready ", time.Minute), "ready ")
		all = append(all, p)
		return p
	}
	begin := time.Now()
	workers := make([]*proc, procs)
	for i := range workers {
		workers[i] = start(i)
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
	every := func() time.Duration { return time.Duration(float64(cfg.crashKillEvery) * (0.5 + rng.Float64())) }
	timer := time.NewTimer(every())
	defer timer.Stop()
	sample := time.NewTicker(200 * time.Millisecond)
	defer sample.Stop()
	var kills []chaos.Kill
	for writing || len(kills) < cfg.killsMinKills {
		select {
		case <-sample.C:
			if !writing {
				continue
			}
			var n int
			if err := tg.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tg.Table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n < cfg.killsEvents {
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
			i := rng.IntN(procs)
			victim := workers[i]
			victim.kill()
			<-victim.exited
			// Every delivery the victim recorded committed before this
			// instant; what it still leases it had claimed and not
			// finished.
			at := time.Now()
			checkRaces(t, victim)
			held, err := chaos.LeasedIDs(ctx, tg.DB, dialect, tg.Table, victim.owner)
			if err != nil {
				t.Fatal(err)
			}
			kills = append(kills, chaos.Kill{Owner: victim.owner, At: at, Held: held})
			workers[i] = start(i)
			timer.Reset(every())
		}
	}
	for i, w := range workers {
		if wrote[i] {
			w.line(t, "written=", time.Minute)
		}
	}
	writeTime := time.Since(begin)
	var events int
	if err := tg.DB.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tg.Table).Scan(&events); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Minute, 200*time.Millisecond, fmt.Sprintf("%d DONE rows", events), func() (bool, error) {
		c, err := chaos.StatusCounts(ctx, tg.DB, tg.Table)
		return err == nil && c[core.StatusDone] == events, err
	})
	took := time.Since(begin)
	for _, w := range workers {
		w.stop(t, time.Minute)
	}

	r := killRun{events: events, kills: len(kills), took: took, writing: writeTime}
	for _, p := range all {
		p.mu.Lock()
		lines := slices.Clone(p.lines)
		p.mu.Unlock()
		for _, l := range lines {
			var kind, outcome string
			var n int
			var ns int64
			if !strings.HasPrefix(l, "done-write ") {
				continue
			}
			if _, err := fmt.Sscanf(l, "done-write %s %d %d %s", &kind, &n, &ns, &outcome); err != nil {
				t.Fatalf("%s output %q: %v", p.name, l, err)
			}
			if kind == "held" && ordered {
				r.heldWrites = append(r.heldWrites, time.Duration(ns))
			} else if want := map[bool]string{true: "ordered", false: "batch"}[ordered]; kind != want {
				t.Errorf("%s: a DONE write of kind %q in a run whose writes are %q", p.name, kind, want)
			} else {
				r.doneWrites = append(r.doneWrites, time.Duration(ns))
			}
			if outcome != "ok" {
				r.failed++
			}
		}
	}
	ds, err := deliveries.All(ctx, tg.DB)
	if err != nil {
		t.Fatal(err)
	}
	sum := chaos.Summarize(ds)
	cl := chaos.Classify(ds, kills)
	r.duplicates, r.explained, r.unexplained, r.gaps = sum.Extra(), cl.Explained, len(cl.Unexplained), cl.Gaps
	if r.lost, err = deliveries.Lost(ctx, tg.DB, tg.Table); err != nil {
		t.Fatal(err)
	}
	ods, err := deliveries.AllCounted(ctx, tg.DB, tg.Table)
	if err != nil {
		t.Fatal(err)
	}
	var first []string
	r.violations, first, _ = checkOrder(ods)

	kind := map[bool]string{true: "ordered (MarkDoneOrdered)", false: "unordered (MarkDoneBatch)"}[ordered]
	held := ""
	if len(r.heldWrites) > 0 {
		kind = "ordered (MarkDoneOrderedNoWait)"
		held = fmt.Sprintf("; then for held key rows (MarkDoneOrdered) %d: p50 %s, p99 %s, max %s", len(r.heldWrites),
			ms(percentile(r.heldWrites, 50)), ms(percentile(r.heldWrites, 99)), ms(percentile(r.heldWrites, 100)))
	}
	t.Logf("ordered kills %s %s (%s): %d events over %d keys in %s (written in %s), %d kills, %d duplicates "+
		"(%.1f per kill; %d explained by a kill, %d unexplained), %d lost, %d order violations, "+
		"DONE writes %d: p50 %s, p99 %s, max %s%s (%d failed); a duplicate's first delivery finished before its kill by p50 %s, max %s",
		dialect, kind, cfg.name, events, cfg.killsKeys, took.Round(100*time.Millisecond), writeTime.Round(100*time.Millisecond),
		r.kills, r.duplicates, r.perKill(), r.explained, r.unexplained, r.lost, r.violations,
		len(r.doneWrites), ms(percentile(r.doneWrites, 50)), ms(percentile(r.doneWrites, 99)), ms(percentile(r.doneWrites, 100)), held, r.failed,
		ms(percentile(r.gaps, 50)), ms(percentile(r.gaps, 100)))
	if r.lost != 0 {
		t.Errorf("%d events lost (DONE without a recorded delivery)", r.lost)
	}
	if ordered && r.violations > 0 {
		t.Errorf("%d order violations; first: %s", r.violations, strings.Join(first, "\n"))
	}
	if r.unexplained > 0 {
		killedAt := map[string]time.Time{}
		for _, k := range kills {
			killedAt[k.Owner] = k.At
		}
		counted := map[string]chaos.OrderedDelivery{}
		for _, d := range ods {
			counted[d.EventID] = d
		}
		var b strings.Builder
		for _, u := range cl.Unexplained[:min(len(cl.Unexplained), 10)] {
			p := counted[u.EventID]
			fmt.Fprintf(&b, "\n  %s (key %s, #%d):", u.EventID, p.AggregateID, p.Seq)
			for _, d := range ds {
				if d.EventID != u.EventID {
					continue
				}
				fmt.Fprintf(&b, " [%s +%s..+%s", d.Owner, d.Started.Sub(begin).Round(time.Millisecond), d.Finished.Sub(begin).Round(time.Millisecond))
				if at, ok := killedAt[d.Owner]; ok {
					fmt.Fprintf(&b, ", killed +%s", at.Sub(begin).Round(time.Millisecond))
				}
				b.WriteString("]")
			}
		}
		var logs []string
		for _, p := range all {
			for _, l := range strings.Split(p.stderr.String(), "\n") {
				if l != "" && len(logs) < 10 {
					logs = append(logs, p.name+": "+l)
				}
			}
		}
		t.Errorf("%d duplicate deliveries that no kill explains (a second delivery among live processes); their events' deliveries:%s\nworker logs:\n%s",
			r.unexplained, b.String(), strings.Join(logs, "\n"))
	}
	if r.kills < cfg.killsMinKills {
		t.Errorf("only %d kills, want at least %d", r.kills, cfg.killsMinKills)
	}
	return r
}
