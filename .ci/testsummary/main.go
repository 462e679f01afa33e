// Command testsummary runs go test with -json and prints what go test would
// print without it: package results, and the output of failed tests (every
// line when the go test flags include -v), one package at a time as each
// finishes, so that packages running in parallel do not interleave. It ends
// with a count of passed, failed and skipped tests per package, one line
// saying which databases the tests ran against and which they skipped, and
// why (a package whose database tests all skipped prints "ok" like one whose
// tests ran; that line tells them apart), and the totals. It exits with go
// test's status.
//
// Usage (the Makefile's test target): testsummary -- go test [flags] [packages]
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
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
	pkgs := filter(out, os.Stdout, verbose, dbs)
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
	fmt.Println(summary(dbs))
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
// in one block. It records in dbs which databases tests ran against or
// skipped, and returns each package's result in the order they finished.
func filter(r io.Reader, w io.Writer, verbose bool, dbs []*database) []pkgResult {
	var (
		groups  = map[string][]string{} // package + top-level test -> its output so far
		tests   = map[string][]string{} // package + test -> its own output, for skip reasons
		pending = map[string][]string{} // package -> output held until it finishes
		tallies = map[string]*counts{}
		results []pkgResult
	)
	emit := func(pkg, text string) { pending[pkg] = append(pending[pkg], text) }
	tally := func(pkg string) *counts {
		if tallies[pkg] == nil {
			tallies[pkg] = &counts{}
		}
		return tallies[pkg]
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
				fmt.Fprint(w, strings.Join(pending[e.Package], ""))
				delete(pending, e.Package)
				result := map[string]string{"pass": "ok", "fail": "FAIL", "skip": "?"}[e.Action]
				results = append(results, pkgResult{name: e.Package, result: result, counts: *tally(e.Package)})
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
			record(dbs, e, tests[tkey])
			delete(tests, tkey)
			c := tally(e.Package)
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
		results = append(results, pkgResult{name: pkg, result: "FAIL", counts: *tally(pkg)})
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

// record counts a finished test towards the database it names: a skip
// that names the database's variable (testdb says which one to set, or that
// its server was unreachable), or a test that ran and is the database's: a
// segment of its name is the dialect (testdb.ForEach names subtests so) or
// it is in that dialect's store package.
func record(dbs []*database, e event, output []string) {
	text := strings.Join(output, "")
	for _, db := range dbs {
		switch {
		case e.Action == "skip" && db.env != "" && strings.Contains(text, db.env):
			db.skips++
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

// summary is the last line, e.g. "databases: sqlite ran; postgres ran;
// mysql skipped 40 tests (set OUTBOX_MYSQL_DSN)". A server database counts
// as ran only when no test skipped for want of it, its variable is set, and
// some test that names it ran: some tests of the store packages need no
// server, so their passing alone proves nothing.
func summary(dbs []*database) string {
	parts := make([]string, 0, len(dbs))
	for _, db := range dbs {
		var s string
		switch {
		case db.skips > 0:
			s = fmt.Sprintf("%s skipped %d tests (%s)", db.name, db.skips, db.skipped)
		case db.ran > 0 && (db.env == "" || os.Getenv(db.env) != ""):
			s = db.name + " ran"
		default:
			s = db.name + " not used by these packages"
		}
		parts = append(parts, s)
	}
	return "databases: " + strings.Join(parts, "; ")
}
