// Command testsummary runs go test with -json and prints what go test would
// print without it: package results, and the output of failed tests (every
// line when the go test flags include -v), one package at a time as each
// finishes, so that packages running in parallel do not interleave. It ends
// with a count of passed, failed and skipped tests per package, one line
// saying which groups of tests ran and which skipped, and why: the
// databases and brokers the tests need, the tools and browsers some of them
// need (browser tests, promtool tests), the runs that are opt-in, and any
// other test that skipped for want of something in its environment (a
// package whose tests all skipped prints "ok" like one whose tests ran; that
// line tells them apart), and the totals. It exits with go test's status.
//
// Usage (the Makefile's test target): testsummary -- go test [flags] [packages]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
)

// event is one line of go test -json (see go doc test2json and go help
// buildjson).
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build events
}

// database is one server the tests can run against: its dialect name, which
// names the subtests and the store package that use it, and the variable
// whose absence makes them skip.
type database struct {
	name, env string
	ran       int    // tests that ran and name it (see record)
	skips     int    // tests that skipped for want of it
	skipped   string // why, from the first skip seen
}

// group is a set of tests that need something besides a database: a tool,
// a browser, or a variable that opts in to a long run. Its tests are those
// of a package (pkg, a suffix of the import path), or only those whose
// top-level name is test.
type group struct {
	name, pkg, test string
	ran, skips      int
	skipped         string // why, from the first skip seen
}

// groups are the known groups, in the order the summary names them.
func groups() []*group {
	return []*group{
		{name: "browser tests", pkg: "/console/browsertest"},
		{name: "promtool tests", pkg: "/metrics/prometheus", test: "TestAlertRules"},
		{name: "JetStream cluster run", pkg: "/broker/jetstream", test: "TestClusterNodeKilledDuringDrain"},
	}
}

func (g *group) has(e event) bool {
	if !strings.HasSuffix(e.Package, g.pkg) {
		return false
	}
	top, _, _ := strings.Cut(e.Test, "/")
	return g.test == "" || top == g.test
}

func main() {
	flag.Parse()
	args := flag.Args()
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testsummary -- go test [flags] [packages]")
		os.Exit(2)
	}
	verbose := slices.Contains(args, "-v") || slices.Contains(args, "-v=true")
	// -json goes right after "test" so that it is read as a go test flag.
	cmdArgs := append([]string{args[1], "-json"}, args[2:]...)
	cmd := exec.Command(args[0], cmdArgs...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	dbs := []*database{{name: "sqlite"}, {name: "postgres", env: "OUTBOX_POSTGRES_DSN"}, {name: "mysql", env: "OUTBOX_MYSQL_DSN"},
		// The brokers: their tests are those of the broker module of that
		// name (package .../broker/jetstream, .../broker/rabbitmq).
		{name: "jetstream", env: "OUTBOX_NATS_URL"}, {name: "rabbitmq", env: "OUTBOX_AMQP_URL"}}
	tally := &tally{dbs: dbs, groups: groups()}
	pkgs := filter(out, os.Stdout, verbose, tally)
	status := 0
	if err := cmd.Wait(); err != nil {
		status = 1
		if ee, ok := err.(*exec.ExitError); ok {
			status = ee.ExitCode()
		}
	}
	var total counts
	fmt.Println("\n== test summary")
	for _, p := range pkgs {
		fmt.Printf("%-4s %-60s %s\n", p.result, p.name, p.counts)
		total.add(p.counts)
	}
	fmt.Println(tally.summary())
	fmt.Println("tests:", total)
	os.Exit(status)
}

// counts are the tests (subtests included) that passed, failed and skipped.
type counts struct{ passed, failed, skipped int }

func (c *counts) add(o counts) {
	c.passed += o.passed
	c.failed += o.failed
	c.skipped += o.skipped
}

func (c counts) String() string {
	return fmt.Sprintf("%d passed, %d failed, %d skipped", c.passed, c.failed, c.skipped)
}

// pkgResult is one package's result line: ok, FAIL or ? (no test files).
type pkgResult struct {
	name, result string
	counts
}

// filter copies the output of the events read from r to w: all of it when
// verbose, otherwise package results, build errors and the output of each
// top-level test that failed (with its subtests), as plain go test shows
// them. A package's output is held until the package finishes, then written
// in one block. It records in tl which groups of tests ran or skipped, and
// returns each package's result in the order they finished.
func filter(r io.Reader, w io.Writer, verbose bool, tl *tally) []pkgResult {
	var (
		groups  = map[string][]string{} // package + top-level test -> its output so far
		tests   = map[string][]string{} // package + test -> its own output, for skip reasons
		pending = map[string][]string{} // package -> output held until it finishes
		perPkg  = map[string]*counts{}
		results []pkgResult
	)
	emit := func(pkg, text string) { pending[pkg] = append(pending[pkg], text) }
	pkgCounts := func(pkg string) *counts {
		if perPkg[pkg] == nil {
			perPkg[pkg] = &counts{}
		}
		return perPkg[pkg]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(w, sc.Text()) // not an event: pass it on
			continue
		}
		switch {
		case e.Action == "build-output":
			fmt.Fprint(w, e.Output)
			continue
		case e.Test == "":
			switch e.Action {
			case "output":
				if verbose || e.Output != "PASS\n" {
					emit(e.Package, e.Output)
				}
			case "pass", "fail", "skip":
				if e.Action == "fail" && !verbose {
					// Tests that never finished (go test's timeout panic
					// ends the binary): their output, the panic's
					// included, would otherwise be lost.
					for _, key := range slices.Sorted(maps.Keys(groups)) {
						if strings.HasPrefix(key, e.Package+" ") {
							emit(e.Package, fmt.Sprintf("=== unfinished: %s\n%s", strings.TrimPrefix(key, e.Package+" "),
								strings.Join(groups[key], "")))
							delete(groups, key)
						}
					}
				}
				fmt.Fprint(w, strings.Join(pending[e.Package], ""))
				delete(pending, e.Package)
				result := map[string]string{"pass": "ok", "fail": "FAIL", "skip": "?"}[e.Action]
				results = append(results, pkgResult{name: e.Package, result: result, counts: *pkgCounts(e.Package)})
			}
			continue
		}
		top, _, _ := strings.Cut(e.Test, "/")
		gkey, tkey := e.Package+" "+top, e.Package+" "+e.Test
		switch e.Action {
		case "output":
			tests[tkey] = append(tests[tkey], e.Output)
			if verbose {
				emit(e.Package, e.Output)
			} else if !quiet(e.Output) {
				groups[gkey] = append(groups[gkey], e.Output)
			}
		case "pass", "fail", "skip":
			tl.record(e, tests[tkey])
			delete(tests, tkey)
			c := pkgCounts(e.Package)
			switch e.Action {
			case "pass":
				c.passed++
			case "fail":
				c.failed++
			case "skip":
				c.skipped++
			}
			if e.Test == top {
				if e.Action == "fail" && !verbose {
					emit(e.Package, strings.Join(groups[gkey], ""))
				}
				delete(groups, gkey)
			}
		}
	}
	// A package that never reported (go test was killed): show what it said.
	for pkg, out := range pending {
		fmt.Fprint(w, strings.Join(out, ""))
		results = append(results, pkgResult{name: pkg, result: "FAIL", counts: *pkgCounts(pkg)})
	}
	return results
}

// quiet reports whether line is one that go test prints only with -v: a
// test starting, pausing or resuming, or a subtest that passed.
func quiet(line string) bool {
	line = strings.TrimLeft(line, " ")
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME", "--- PASS"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

// tally records which groups of tests ran and which skipped.
type tally struct {
	dbs    []*database
	groups []*group
	// others are the tests that skipped for want of something in their
	// environment and belong to no database or group, by package.
	others      map[string]*group
	othersOrder []string
}

// envSkip matches the reasons of skips for want of something in the
// environment: a variable to set, a program to install or find, a server
// that does not answer. Skips for other reasons (a store without a
// capability, a helper process) are by design, and not reported.
var envSkip = regexp.MustCompile(`(?i)\bset [A-Z][A-Z0-9_]*|not found|not installed|install |on PATH|unreachable|does not answer|no /proc`)

// record counts a finished test towards the database it names (a skip
// that names the database's variable, which testdb says to set, or that its
// server was unreachable; or a test that ran and is the database's: a
// segment of its name is the dialect, as testdb.ForEach names subtests, or
// it is in that dialect's store package), towards the group it belongs to,
// or, when it skipped for want of something in its environment, towards
// its package's entry among the others.
func (tl *tally) record(e event, output []string) {
	text := strings.Join(output, "")
	counted := false
	for _, db := range tl.dbs {
		switch {
		case e.Action == "skip" && db.env != "" && strings.Contains(text, db.env):
			db.skips++
			counted = true
			if db.skipped == "" {
				db.skipped = "set " + db.env
				if strings.Contains(text, "unreachable") {
					db.skipped = "server of " + db.env + " unreachable"
				}
			}
		case e.Action != "skip" && names(e, db.name):
			db.ran++
		}
	}
	if counted {
		return
	}
	for _, g := range tl.groups {
		if g.has(e) {
			g.count(e, text)
			return
		}
	}
	if e.Action != "skip" || !envSkip.MatchString(text) {
		return
	}
	pkg := strings.TrimPrefix(e.Package, "github.com/outboxkit/outbox/")
	if tl.others == nil {
		tl.others = map[string]*group{}
	}
	g := tl.others[pkg]
	if g == nil {
		g = &group{name: pkg}
		tl.others[pkg] = g
		tl.othersOrder = append(tl.othersOrder, pkg)
	}
	g.count(e, text)
}

// count counts a finished test of g.
func (g *group) count(e event, text string) {
	if e.Action != "skip" {
		g.ran++
		return
	}
	g.skips++
	if g.skipped == "" {
		g.skipped = skipReason(text)
	}
}

// skipReason returns the message of a skipped test's output: its last
// line that is not go test's own, without the file:line prefix.
func skipReason(text string) string {
	reason := ""
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- ") {
			continue
		}
		if i := strings.Index(line, ".go:"); i >= 0 {
			if j := strings.Index(line[i:], ": "); j >= 0 {
				line = line[i+j+2:]
			}
		}
		reason = line
	}
	if reason == "" {
		return "no reason given"
	}
	return reason
}

func names(e event, dialect string) bool {
	if strings.HasSuffix(e.Package, "/store/"+dialect) || strings.HasSuffix(e.Package, "/broker/"+dialect) {
		return true
	}
	for seg := range strings.SplitSeq(e.Test, "/") {
		if seg == dialect {
			return true
		}
	}
	return false
}

// summary is the last line but one, e.g. "groups: sqlite ran; postgres
// ran; mysql skipped 40 tests (set OUTBOX_MYSQL_DSN); ...; browser tests
// skipped 3 tests (no Chromium on PATH ...); promtool tests ran". A server
// database counts as ran only when no test skipped for want of it, its
// variable is set, and some test that names it ran: some tests of the
// store packages need no server, so their passing alone proves nothing.
func (tl *tally) summary() string {
	var parts []string
	for _, db := range tl.dbs {
		var s string
		switch {
		case db.skips > 0:
			s = fmt.Sprintf("%s skipped %s (%s)", db.name, tests(db.skips), db.skipped)
		case db.ran > 0 && (db.env == "" || os.Getenv(db.env) != ""):
			s = db.name + " ran"
		default:
			s = db.name + " not used by these packages"
		}
		parts = append(parts, s)
	}
	gs := tl.groups
	for _, pkg := range tl.othersOrder {
		gs = append(gs, tl.others[pkg])
	}
	for _, g := range gs {
		var s string
		switch {
		case g.skips > 0:
			s = fmt.Sprintf("%s skipped %s (%s)", g.name, tests(g.skips), g.skipped)
		case g.ran > 0:
			s = g.name + " ran"
		default:
			s = g.name + " not used by these packages"
		}
		parts = append(parts, s)
	}
	return "groups: " + strings.Join(parts, "; ")
}

// tests is "1 test" or "N tests".
func tests(n int) string {
	if n == 1 {
		return "1 test"
	}
	return fmt.Sprintf("%d tests", n)
}
