// Package procstat reads the CPU time of processes and the load average
// from Linux's /proc, for the benchmarks: how much CPU an event cost the
// bench process and the database or broker server beside it, and where
// the bench process allocated (WriteAllocs).
//
// On a system without /proc every reading fails or comes out empty; the
// benchmarks then print "?" where a figure would be.
package procstat

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux the project runs on).
const clockTick = 10 * time.Millisecond

// Times is the CPU time, user plus system, of one process: Self its own,
// Children that of its children it has waited for (a PostgreSQL backend
// that exited lands in its postmaster's Children).
type Times struct{ Self, Children time.Duration }

// Read returns the Times of pid ("self" for this process) from
// /proc/<pid>/stat.
func Read(pid string) (Times, error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return Times{}, err
	}
	return parseStat(pid, b)
}

// parseStat reads the Times out of the contents b of /proc/<pid>/stat.
func parseStat(pid string, b []byte) (Times, error) {
	// The command (field 2) is in parentheses and may hold spaces: the
	// fields counted from 3 start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return Times{}, fmt.Errorf("/proc/%s/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return Times{}, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(f))
	}
	var ticks [4]int64 // utime, stime, cutime, cstime: fields 14-17
	for k := range ticks {
		var err error
		if ticks[k], err = strconv.ParseInt(f[11+k], 10, 64); err != nil {
			return Times{}, fmt.Errorf("/proc/%s/stat: field %d: %w", pid, 14+k, err)
		}
	}
	return Times{Self: time.Duration(ticks[0]+ticks[1]) * clockTick,
		Children: time.Duration(ticks[2]+ticks[3]) * clockTick}, nil
}

// Named returns the pids of the processes whose command name (comm) is one
// of comms.
func Named(comms ...string) []int {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		if err == nil && contains(comms, strings.TrimSpace(string(b))) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// ServerCPU returns the CPU time used so far by every process named one of
// comms, with the children they have waited for, and how many processes it
// summed. For a server that forks a process per connection (PostgreSQL),
// the difference of two readings is what the server used in between, even
// when connections closed meanwhile: an exited backend's time moves to its
// postmaster's Children. It returns n == 0 when no such process runs (the
// server is on another machine).
func ServerCPU(comms ...string) (d time.Duration, n int) {
	for _, pid := range Named(comms...) {
		t, err := Read(strconv.Itoa(pid))
		if err != nil {
			continue // exited between the listing and the read
		}
		d += t.Self + t.Children
		n++
	}
	return d, n
}

// PGBackends returns the pids of the PostgreSQL backends serving the
// connections whose application_name is appName (a bench sets its own, by
// PGAPPNAME or in the DSN), listed through db; nil when they cannot be
// listed (db's own connection among them when it shares the name: its
// few queries count). Their CPU time (Read) means something only with the
// server on this machine.
func PGBackends(ctx context.Context, db *sql.DB, appName string) []int {
	rows, err := db.QueryContext(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = $1", appName)
	if err != nil {
		return nil
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if rows.Scan(&pid) == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// LoadAvg returns the first three fields of /proc/loadavg, or "?".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// WriteAllocs writes this process's allocation profile (the allocations
// made since it started, by where they were made) to path.
func WriteAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
