package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
)

// counters are process-wide totals that tell where a run's CPU goes
// independently of how busy the machine is: goroutines started (each one
// the Go runtime may wake an idle thread for), heap allocations, GC cycles,
// write system calls and the bytes they wrote (on SQLite, the WAL frames),
// and the context switches of all the process's threads.
type counters struct {
	goroutines, mallocs, gcs uint64
	allocBytes               uint64
	gcCPU                    float64 // seconds, the runtime's estimate
	syscw, wchar             uint64
	ctxSwitches              uint64
}

func readCounters() counters {
	s := []rtmetrics.Sample{{Name: "/sched/goroutines-created:goroutines"}, {Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	rtmetrics.Read(s)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	c := counters{mallocs: ms.Mallocs, allocBytes: ms.TotalAlloc}
	if s[2].Value.Kind() == rtmetrics.KindFloat64 {
		c.gcCPU = s[2].Value.Float64()
	}
	if s[0].Value.Kind() == rtmetrics.KindUint64 {
		c.goroutines = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == rtmetrics.KindUint64 {
		c.gcs = s[1].Value.Uint64()
	}
	procFields("/proc/self/io", func(k, v string) {
		switch k {
		case "syscw":
			c.syscw = parseUint(v)
		case "wchar":
			c.wchar = parseUint(v)
		}
	})
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, t := range tasks {
		procFields(t, func(k, v string) {
			if k == "voluntary_ctxt_switches" || k == "nonvoluntary_ctxt_switches" {
				c.ctxSwitches += parseUint(v)
			}
		})
	}
	return c
}

func (c counters) sub(o counters) counters {
	return counters{c.goroutines - o.goroutines, c.mallocs - o.mallocs, c.gcs - o.gcs, c.allocBytes - o.allocBytes,
		c.gcCPU - o.gcCPU, c.syscw - o.syscw, c.wchar - o.wchar, c.ctxSwitches - o.ctxSwitches}
}

func (c counters) add(o counters) counters {
	return counters{c.goroutines + o.goroutines, c.mallocs + o.mallocs, c.gcs + o.gcs, c.allocBytes + o.allocBytes,
		c.gcCPU + o.gcCPU, c.syscw + o.syscw, c.wchar + o.wchar, c.ctxSwitches + o.ctxSwitches}
}

// perEvent renders c divided by n events.
func (c counters) perEvent(n int) string {
	f := func(v uint64) float64 { return float64(v) / float64(max(n, 1)) }
	return fmt.Sprintf("allocs %.0f (%.0f B), GC %.1f µs, goroutines %.1f, write syscalls %.1f (%.0f B), context switches %.1f; %d GC cycles",
		f(c.mallocs), f(c.allocBytes), c.gcCPU*1e6/float64(max(n, 1)), f(c.goroutines), f(c.syscw), f(c.wchar), f(c.ctxSwitches), c.gcs)
}

// procFields calls fn with each "key: value" line of a /proc file; a file
// that cannot be read (not Linux) gives nothing.
func procFields(path string, fn func(k, v string)) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
			fn(k, strings.TrimSpace(v))
		}
	}
}

func parseUint(s string) uint64 {
	v, _ := strconv.ParseUint(s, 10, 64)
	return v
}
