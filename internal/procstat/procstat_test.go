package procstat

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func needProc(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skipf("no /proc on %s: %v", runtime.GOOS, err)
	}
}

func TestReadSelfGrowsWithWork(t *testing.T) {
	needProc(t)
	before, err := Read("self")
	if err != nil {
		t.Fatal(err)
	}
	// Burn 100 ms of CPU as getrusage counts it (wall time would depend on
	// the machine's load).
	start := rusage(t)
	for rusage(t)-start < 100*time.Millisecond {
	}
	after, err := Read("self")
	if err != nil {
		t.Fatal(err)
	}
	if got := after.Self - before.Self; got < 50*time.Millisecond {
		t.Fatalf("100 ms of CPU by getrusage read as %s from /proc", got)
	}
}

func rusage(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestParseStat(t *testing.T) {
	// The command may hold spaces and parentheses: fields count from the
	// last ')'.
	stat := "42 (a) (b c) S 1 42 42 0 -1 4194304 100 0 0 0 7 3 5 1 20 0 1 0 100 1000 10\n"
	got, err := parseStat("42", []byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Times{Self: 10 * clockTick, Children: 6 * clockTick}); got != want {
		t.Fatalf("parseStat = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"42 no parens", "42 (x) S 1 2", "42 (x) S 1 42 42 0 -1 4194304 100 0 0 0 seven 3 5 1 20"} {
		if _, err := parseStat("42", []byte(bad)); err == nil {
			t.Errorf("parseStat(%q) succeeded", bad)
		}
	}
}

func TestReadMissingProcess(t *testing.T) {
	needProc(t)
	if _, err := Read("0"); err == nil {
		t.Fatal("Read of pid 0 succeeded")
	}
}

func TestNamedFindsThisProcess(t *testing.T) {
	needProc(t)
	b, err := os.ReadFile("/proc/self/comm")
	if err != nil {
		t.Fatal(err)
	}
	me := os.Getpid()
	pids := Named("no-such-command", strings.TrimSpace(string(b)))
	for _, p := range pids {
		if p == me {
			d, n := ServerCPU(strings.TrimSpace(string(b)))
			if n == 0 || d <= 0 {
				t.Fatalf("ServerCPU(own name) = %s over %d processes", d, n)
			}
			return
		}
	}
	t.Fatalf("Named did not list this process (%d) among %v", me, pids)
}

func TestServerCPUNone(t *testing.T) {
	if d, n := ServerCPU("no-such-command-" + strconv.Itoa(os.Getpid())); d != 0 || n != 0 {
		t.Fatalf("ServerCPU of no process = %s, %d", d, n)
	}
}

func TestLoadAvg(t *testing.T) {
	needProc(t)
	f := strings.Fields(LoadAvg())
	if len(f) != 3 {
		t.Fatalf("LoadAvg = %q, want three fields", LoadAvg())
	}
	for _, x := range f {
		if _, err := strconv.ParseFloat(x, 64); err != nil {
			t.Fatalf("LoadAvg field %q: %v", x, err)
		}
	}
}
