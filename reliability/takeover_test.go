package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/reliability/internal/chaos"
)

// takeoverRun is one single-active takeover scenario on one database.
type takeoverRun struct {
	dialect, dsn, outbox string
	deliveries           chaos.Deliveries
	lease                time.Duration
	position             bool // outbox.DeliveryPosition
}

// flags returns the relaynode flags of the run's delivery.
func (r *takeoverRun) flags() []string {
	if r.position {
		return []string{"-position"}
	}
	return nil
}

// startRelay starts a relay process (reliability/internal/relaynode) and
// waits until it runs.
func (r *takeoverRun) startRelay(t *testing.T, n int) *proc {
	t.Helper()
	args := append([]string{"-role", "relay",
		"-dialect", r.dialect, "-dsn", r.dsn, "-table", r.outbox, "-deliveries", r.deliveries.Table(),
		"-lease", r.lease.String(), "-interval", "100ms", "-work", "10ms", "-v"}, r.flags()...)
	p := startBinary(t, buildHelper(t, "relaynode"), fmt.Sprintf("relay-%d", n), args...)
	p.owner = strings.TrimPrefix(p.line(t, "ready ", time.Minute), "ready ")
	return p
}

// stamp reads the Unix-nanosecond time of p's first line starting with
// prefix.
func stamp(t *testing.T, p *proc, prefix string) time.Time {
	t.Helper()
	ns, err := strconv.ParseInt(strings.TrimPrefix(p.line(t, prefix+" ", time.Minute), prefix+" "), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	return time.Unix(0, ns)
}

// TestSingleActiveTakeover: two relay processes with SingleActive on one
// table, a writer process writing events that only the active relay
// delivers (WriterOnly, no hot path); the listener works 10 ms per event, so
// that a kill finds deliveries in flight. The test SIGKILLs the active relay
// while it delivers, measures how long the standby takes to hold the relay
// lock and to deliver, starts a fresh standby, and repeats. Every event must
// end DONE, delivered at least once; events delivered twice must be among
// those the killed relays held when they died.
func TestSingleActiveTakeover(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			tg := testdb.Open(t, dialect)
			env := testdb.PostgresEnv
			if dialect == "mysql" {
				env = testdb.MySQLEnv
			}
			r := &takeoverRun{dialect: dialect, dsn: os.Getenv(env), outbox: tg.Table, lease: 3 * time.Second}
			runTakeover(t, r, tg)
		})
	}
}

func runTakeover(t *testing.T, r *takeoverRun, tg testdb.Target) {
	ctx := context.Background()
	var err error
	r.deliveries, err = chaos.NewDeliveries(r.dialect, testdb.UniqueName("deliv"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.deliveries.Create(ctx, tg.DB); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupCtx()
		defer cancel()
		if err := r.deliveries.Drop(ctx, tg.DB); err != nil {
			t.Error(err)
		}
	})

	takeovers := cfg.takeovers
	const rate = 200.0
	// Enough events for the writer to outlast the kills, at about three
	// seconds per takeover.
	events := int(rate) * (3*takeovers + 2)

	relays := []*proc{r.startRelay(t, 0)}
	all := relays[:1:1]
	stamp(t, relays[0], "active")
	relays = append(relays, r.startRelay(t, 1))
	all = append(all, relays[1])
	writer := startBinary(t, buildHelper(t, "relaynode"), "writer", append([]string{"-role", "writer", "-dialect", r.dialect,
		"-dsn", r.dsn, "-table", r.outbox, "-events", fmt.Sprint(events), "-rate", fmt.Sprint(rate)}, r.flags()...)...)

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	var lockTimes, deliveryTimes []time.Duration
	heldAtKills := 0
	killed := map[string]bool{} // owners of the killed relays
	for k := range takeovers {
		active, standby := relays[0], relays[1]
		// Kill while the active relay delivers: after its first delivery,
		// at a random point of the next second and a half.
		stamp(t, active, "first")
		time.Sleep(500*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second)))) // pacing of the kills, not synchronisation
		killedAt := time.Now()
		killed[active.owner] = true
		active.kill()
		<-active.exited
		checkRaces(t, active)
		heldIDs, err := chaos.LeasedIDs(ctx, tg.DB, r.dialect, r.outbox, active.owner)
		if err != nil {
			t.Fatal(err)
		}
		held := len(heldIDs)
		heldAtKills += held
		lockTimes = append(lockTimes, stamp(t, standby, "active").Sub(killedAt))
		deliveryTimes = append(deliveryTimes, stamp(t, standby, "first").Sub(killedAt))
		fresh := r.startRelay(t, len(all))
		all = append(all, fresh)
		relays = []*proc{standby, fresh}
		t.Logf("takeover %d: lock held by the standby %s after the kill, first delivery %s (%d events held by the killed relay)",
			k+1, ms(lockTimes[k]), ms(deliveryTimes[k]), held)
	}

	<-writer.exited
	checkRaces(t, writer)
	if writer.err != nil {
		t.Fatalf("writer: %v; stderr:\n%s", writer.err, writer.stderr.String())
	}
	waitUntil(t, 3*time.Minute, 200*time.Millisecond, fmt.Sprintf("%d DONE rows", events), func() (bool, error) {
		if r.position {
			// Delivered STREAM rows stay STREAM: wait for the deliveries.
			lost, err := r.deliveries.Lost(ctx, tg.DB, r.outbox)
			return err == nil && lost == 0, err
		}
		c, err := chaos.StatusCounts(ctx, tg.DB, r.outbox)
		return err == nil && c[core.StatusDone] == events, err
	})
	for _, p := range relays {
		p.stop(t, time.Minute)
	}

	delivered, err := r.deliveries.All(ctx, tg.DB)
	if err != nil {
		t.Fatal(err)
	}
	sum := chaos.Summarize(delivered)
	lost, err := r.deliveries.Lost(ctx, tg.DB, r.outbox)
	if err != nil {
		t.Fatal(err)
	}
	strays, err := r.deliveries.Strays(ctx, tg.DB, r.outbox)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("single-active takeover %s (%s, 2 relays, SingleActiveInterval 1s, lease %s): %d events, %d kills; "+
		"lock taken over after p50 %s max %s, delivery resumed after p50 %s max %s; %d lost, %d duplicated (%d held by killed relays)",
		r.dialect, cfg.name, r.lease, events, takeovers,
		ms(percentile(lockTimes, 50)), ms(percentile(lockTimes, 100)),
		ms(percentile(deliveryTimes, 50)), ms(percentile(deliveryTimes, 100)),
		lost, sum.Duplicated, heldAtKills)

	if lost != 0 || sum.Events != events || strays != 0 {
		t.Errorf("%d events lost, %d delivered of %d, %d stray deliveries", lost, sum.Events, events, strays)
	}
	if r.position {
		// In position delivery nothing is leased: a killed relay's events
		// in flight, and those it delivered since its last save of the
		// position, are delivered again from the saved position. Every
		// duplicated event must have been delivered by a killed relay.
		first := map[string]string{}
		for _, d := range delivered {
			if o, ok := first[d.EventID]; ok && !killed[o] {
				t.Errorf("event %s delivered again although its first delivery (%s) was not a killed relay's", d.EventID, o)
			} else if !ok {
				first[d.EventID] = d.Owner
			}
		}
	} else if sum.Duplicated > heldAtKills {
		// Only a killed relay's claims can be delivered twice: it may have
		// run the listener and died before writing DONE. The standby waits
		// for their leases to expire.
		t.Errorf("%d duplicated events, more than the %d held by the killed relays", sum.Duplicated, heldAtKills)
	}
	// A standby tries the lock every second: "within seconds" with a margin
	// for a loaded machine.
	if worst := percentile(lockTimes, 100); worst > 5*time.Second {
		t.Errorf("slowest takeover of the relay lock %s, want under 5 s", worst)
	}
}

// TestSingleActiveTakeoverPosition is TestSingleActiveTakeover in position
// delivery (PostgreSQL, MariaDB): the standby reads on from the persisted
// position. Nothing may be lost; an event delivered twice must have been
// delivered first by a killed relay (in flight, or delivered after its last
// save).
func TestSingleActiveTakeoverPosition(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			tg := testdb.Open(t, dialect)
			env := testdb.PostgresEnv
			if dialect == "mysql" {
				env = testdb.MySQLEnv
			}
			r := &takeoverRun{dialect: dialect, dsn: os.Getenv(env), outbox: tg.Table, lease: 3 * time.Second, position: true}
			runTakeover(t, r, tg)
		})
	}
}
