package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// run feeds filter the go test -json events of tests (package, test,
// action, output lines) and returns the summary line.
func run(t *testing.T, tests [][4]string) string {
	t.Helper()
	var b strings.Builder
	enc := json.NewEncoder(&b)
	pkgs := map[string]bool{}
	for _, tc := range tests {
		pkg, test, action, output := tc[0], tc[1], tc[2], tc[3]
		pkgs[pkg] = true
		for line := range strings.SplitSeq(output, "\n") {
			if line != "" {
				if err := enc.Encode(event{Action: "output", Package: pkg, Test: test, Output: line + "\n"}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := enc.Encode(event{Action: action, Package: pkg, Test: test}); err != nil {
			t.Fatal(err)
		}
	}
	for pkg := range pkgs {
		if err := enc.Encode(event{Action: "pass", Package: pkg}); err != nil {
			t.Fatal(err)
		}
	}
	tl := &tally{dbs: []*database{{name: "sqlite"}, {name: "postgres", env: "OUTBOX_POSTGRES_DSN"}}, groups: groups()}
	filter(strings.NewReader(b.String()), io.Discard, false, tl)
	return tl.summary()
}

const mod = "github.com/outboxkit/outbox/"

// TestSummaryNamesEverySkippedGroup: the summary line names the databases,
// the known groups (browser tests, promtool tests, the cluster run) and any
// other test that skipped for want of something in its environment, each
// with why; skips by design (a store without a capability) are not listed.
func TestSummaryNamesEverySkippedGroup(t *testing.T) {
	t.Setenv("OUTBOX_POSTGRES_DSN", "")
	got := run(t, [][4]string{
		{mod + "dispatch", "TestX/sqlite", "pass", ""},
		{mod + "dispatch", "TestX/postgres", "skip", "    testdb.go:151: PostgreSQL tests: set OUTBOX_POSTGRES_DSN=postgres://... to run"},
		{mod + "console/browsertest", "TestConsoleInBrowser/sqlite", "skip",
			"=== RUN   TestConsoleInBrowser/sqlite\n    console_test.go:48: no Chromium on PATH: install Debian's chromium or set OUTBOX_CHROMIUM to a Chromium or Chrome binary"},
		{mod + "console/browsertest", "TestConsoleInBrowser/postgres", "skip", "    console_test.go:48: no Chromium on PATH: install Debian's chromium"},
		{mod + "metrics/prometheus", "TestAlertRules", "skip", "    monitoring_test.go:161: promtool not found (Debian package prometheus); OUTBOX_REQUIRE_DBS=1 makes this a failure"},
		{mod + "metrics/prometheus", "TestDashboard", "pass", ""},
		{mod + "internal/procstat", "TestRead", "skip", "    procstat_test.go:16: no /proc on darwin: open /proc/self/stat: no such file"},
		{mod + "purge", "TestLock/sqlite", "skip", "    lock_test.go:39: sqlite has no named locks: one process owns the database file"},
	})
	want := "groups: sqlite ran; postgres skipped 1 test (set OUTBOX_POSTGRES_DSN); " +
		"browser tests skipped 2 tests (no Chromium on PATH: install Debian's chromium or set OUTBOX_CHROMIUM to a Chromium or Chrome binary); " +
		"promtool tests skipped 1 test (promtool not found (Debian package prometheus); OUTBOX_REQUIRE_DBS=1 makes this a failure); " +
		"JetStream cluster run not used by these packages; " +
		"internal/procstat skipped 1 test (no /proc on darwin: open /proc/self/stat: no such file)"
	if got != want {
		t.Errorf("summary:\n got %s\nwant %s", got, want)
	}

	t.Setenv("OUTBOX_POSTGRES_DSN", "postgres://x")
	got = run(t, [][4]string{
		{mod + "dispatch", "TestX/postgres", "pass", ""},
		{mod + "console/browsertest", "TestConsoleInBrowser/sqlite", "pass", ""},
		{mod + "metrics/prometheus", "TestAlertRules", "pass", ""},
		{mod + "broker/jetstream", "TestClusterNodeKilledDuringDrain", "skip", "    cluster_test.go:30: cluster run: set OUTBOX_BROKER_CLUSTER=1 (make broker-cluster)"},
	})
	want = "groups: sqlite ran; postgres ran; browser tests ran; promtool tests ran; " +
		"JetStream cluster run skipped 1 test (cluster run: set OUTBOX_BROKER_CLUSTER=1 (make broker-cluster))"
	if got != want {
		t.Errorf("summary:\n got %s\nwant %s", got, want)
	}
}

// TestUnfinishedTestsShown: when go test's timeout panic ends a package,
// the output of the tests still running (the panic's with it) is shown,
// not lost with the tests that never reported.
func TestUnfinishedTestsShown(t *testing.T) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	pkg := mod + "reliability"
	for _, e := range []event{
		{Action: "run", Package: pkg, Test: "TestSlow"},
		{Action: "output", Package: pkg, Test: "TestSlow", Output: "    slow_test.go:10: still draining\n"},
		{Action: "output", Package: pkg, Test: "TestSlow", Output: "panic: test timed out after 10m0s\n"},
		{Action: "output", Package: pkg, Output: "FAIL\tgithub.com/outboxkit/outbox/reliability\t600.1s\n"},
		{Action: "fail", Package: pkg},
	} {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	var out strings.Builder
	filter(strings.NewReader(b.String()), &out, false, &tally{groups: groups()})
	for _, want := range []string{"=== unfinished: TestSlow", "still draining", "panic: test timed out after 10m0s"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
