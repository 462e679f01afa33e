package reliability

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/internal/testsupport/testnode"
	"go.uber.org/goleak"
)

// Environment variables of the suite.
const (
	// modeEnv selects the size of the runs: "long" for make chaos, anything
	// else (or unset) for the short version that runs in CI.
	modeEnv = "OUTBOX_CHAOS"
)

// size holds the knobs of one mode.
type size struct {
	name string

	crashEvents     int           // events the writer process writes
	crashRate       float64       // events per second
	crashKillEvery  time.Duration // mean time between SIGKILLs (jittered ±50%)
	crashMinKills   int           // kills the run must reach
	crashHelperRace bool          // build the helper process with -race

	outageEvents int
	outageRate   float64
	outages      int           // outages per database (kinds alternate)
	outageDown   time.Duration // how long a refusing outage lasts

	longOutageEvents int // outages of 5 s against a 2 s lease
	longOutages      int

	poisonEvents int
	poisonRate   float64

	overflowEvents int
	leaseEvents    int

	takeovers int // kills of the active relay in the single-active test

	orderedEvents int     // events of the ordered crash test, all writers together
	orderedKeys   int     // keys they are written to
	orderedRate   float64 // events per second, all writers together

	// TestCrashOrderedKills, each of its runs: events, keys, events per
	// second (all writers together), lease, and the kills a run must reach
	// (no events: the test is skipped).
	killsEvents, killsKeys int
	killsRate              float64
	killsLease             time.Duration
	killsMinKills          int
}

var sizes = map[string]size{
	"short": {
		name:        "short",
		crashEvents: 3000, crashRate: 300, crashKillEvery: 2 * time.Second, crashMinKills: 3,
		outageEvents: 2000, outageRate: 250, outages: 2, outageDown: time.Second,
		longOutageEvents: 2500, longOutages: 1,
		poisonEvents: 1000, poisonRate: 250,
		overflowEvents: 10000,
		leaseEvents:    8,
		takeovers:      3,
		orderedEvents:  1800, orderedKeys: 100, orderedRate: 300,
	},
	"long": {
		name:        "long",
		crashEvents: 20000, crashRate: 500, crashKillEvery: 2 * time.Second, crashMinKills: 20,
		crashHelperRace: true,
		outageEvents:    20000, outageRate: 400, outages: 12, outageDown: 2 * time.Second,
		longOutageEvents: 20000, longOutages: 6,
		poisonEvents: 10000, poisonRate: 500,
		overflowEvents: 10000,
		leaseEvents:    50,
		takeovers:      10,
		orderedEvents:  50000, orderedKeys: 1000, orderedRate: 600,
		killsEvents: 20000, killsKeys: 200, killsRate: 500, killsLease: 5 * time.Second, killsMinKills: 20,
	},
}

// cfg is the size of this run.
var cfg = sizes["short"]

var helperDir string // temp dir of the helper binary; TestMain removes it

func TestMain(m *testing.M) {
	// The MySQL driver logs every connection the tests cut.
	_ = mysqldrv.SetLogger(log.New(io.Discard, "", 0))
	if os.Getenv(modeEnv) == "long" {
		cfg = sizes["long"]
	}
	dir, err := os.MkdirTemp("", "outbox-chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	helperDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	if code == 0 {
		// Every proxy, helper process, node and pool must be gone.
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	helpersMu sync.Mutex
	helpers   = map[string]*helper{} // by package name under internal/, with "-race" when built with it
)

// helper is one helper binary, built once per test binary.
type helper struct {
	once sync.Once
	path string
	err  error
}

// helperBinary builds reliability/internal/chaosnode once per test binary,
// into the directory TestMain created, and returns its path.
func helperBinary(t *testing.T) string {
	t.Helper()
	return buildHelper(t, "chaosnode")
}

// buildHelper builds the command reliability/internal/<name> once per test
// binary (with -race in the long mode), into the directory TestMain
// created, and returns its path.
func buildHelper(t *testing.T, name string) string {
	t.Helper()
	return buildHelperRace(t, name, cfg.crashHelperRace)
}

// buildHelperRace is buildHelper with -race as race says: a test that
// times what the helper does builds it without, since the race detector
// slows it several times over.
func buildHelperRace(t *testing.T, name string, race bool) string {
	t.Helper()
	key := name
	if race {
		key += "-race"
	}
	helpersMu.Lock()
	h := helpers[key]
	if h == nil {
		h = &helper{}
		helpers[key] = h
	}
	helpersMu.Unlock()
	h.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		h.path = filepath.Join(helperDir, key)
		args := []string{"build", "-o", h.path}
		if race {
			args = append(args, "-race")
		}
		args = append(args, "./internal/"+name)
		cmd := exec.Command(goTool, args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			h.err = fmt.Errorf("go %v: %v\n%s", args, err, out)
		}
	})
	if h.err != nil {
		t.Fatal(h.err)
	}
	return h.path
}

// cleanupCtx is for SQL run in t.Cleanup, when the test's contexts are done.
func cleanupCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// waitUntil polls cond every `every` until it holds, failing the test after
// timeout. It is for conditions in the database, which cannot signal.
func waitUntil(t *testing.T, timeout, every time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
		}
		<-tick.C
	}
}

// percentile returns the p-th percentile (0 < p <= 100) of ds, nearest rank.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := int(float64(len(s))*p/100+0.999999) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// ms formats a duration in milliseconds with one decimal.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}

// suiteInterval is the poll interval of the suite's in-process instances.
const suiteInterval = 100 * time.Millisecond

// suiteRetry is the retry policy of the suite's in-process instances.
func suiteRetry() core.RetryPolicy {
	return &core.ExponentialBackoff{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond}
}

// startNode starts an in-process outbox instance on st and db, with the
// suite's backoff and poll interval, and metrics from the poller too.
func startNode(t *testing.T, st core.Store, db *sql.DB, reg *core.Registry, o testnode.Options) *testnode.Node {
	t.Helper()
	return testnode.Start(t, st, db, reg, testnode.Defaults{
		Retry:         suiteRetry(),
		Interval:      suiteInterval,
		PollerMetrics: true,
	}, o)
}

// forEachDialect runs fn as a parallel subtest on a fresh table of each of
// dialects.
func forEachDialect(t *testing.T, dialects []string, fn func(t *testing.T, tg testdb.Target)) {
	t.Helper()
	for _, name := range dialects {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, testdb.Open(t, name))
		})
	}
}

// tableSnapshot summarises a table's rows, to show that a failed call
// changed nothing.
func tableSnapshot(t *testing.T, db *sql.DB, table string) string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(),
		"SELECT event_id, status, attempts, locked_by FROM "+table+" ORDER BY event_id")
	if err != nil {
		t.Fatalf("snapshot %s: %v", table, err)
	}
	defer rows.Close()
	var out []byte
	for rows.Next() {
		var id string
		var st, att int
		var lockedBy sql.NullString
		if err := rows.Scan(&id, &st, &att, &lockedBy); err != nil {
			t.Fatal(err)
		}
		out = fmt.Appendf(out, "%s/%d/%d/%s;", id, st, att, lockedBy.String)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return string(out)
}
