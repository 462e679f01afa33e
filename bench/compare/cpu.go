package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/internal/procstat"
)

// cpuMark is the CPU time used so far by this process and by the database
// server's side of its connections, read before and after a workload.
type cpuMark struct {
	self   time.Duration
	allocs uint64 // heap objects allocated by this process
	// PostgreSQL: each backend of this run's connections (application_name
	// appName); MariaDB, one process for every client: the whole server,
	// under key 0.
	db map[int]time.Duration
}

// appName is the application_name of every PostgreSQL connection this run
// opens (servers puts it in the DSN), so that its backends can be told from
// other clients'.
var appName = "outbox_compare_" + strconv.Itoa(os.Getpid())

// withAppName returns the PostgreSQL dsn naming appName.
func withAppName(dsn string) string {
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return dsn + sep + "application_name=" + appName
}

// markCPU reads a cpuMark; db lists the PostgreSQL backends (nil: the
// server's part is left out). A reading that fails leaves its part out
// (the server on another machine).
func (s *server) markCPU(ctx context.Context, db *sql.DB) cpuMark {
	m := cpuMark{db: map[int]time.Duration{}}
	if t, err := procstat.Read("self"); err == nil {
		m.self = t.Self
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.allocs = ms.Mallocs
	if s.pg() {
		if db == nil {
			return m
		}
		for _, pid := range procstat.PGBackends(ctx, db, appName) {
			if t, err := procstat.Read(strconv.Itoa(pid)); err == nil {
				m.db[pid] = t.Self
			}
		}
		return m
	}
	if d, n := procstat.ServerCPU("mariadbd", "mysqld"); n > 0 {
		m.db[0] = d
	}
	return m
}

// perEvent returns the CPU µs per event of this process and of the server
// between a and b, and this process's heap allocations per event. A backend
// first seen in b started after a (a pool growing) and counts whole; one
// gone from b (a closed connection) is lost.
func perEvent(a, b cpuMark, events int64) (goUs, dbUs, allocs float64) {
	if events <= 0 {
		return 0, 0, 0
	}
	var db time.Duration
	for pid, t := range b.db {
		db += t - a.db[pid]
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) / float64(events) }
	return us(b.self - a.self), us(db), float64(b.allocs-a.allocs) / float64(events)
}

// cpuCell formats a contender's CPU per event.
func cpuCell(o *outcome) string {
	if o.W1GoUs == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f / %.0f (%.0f allocs)", o.W1GoUs, o.W1DBUs, o.W1Allocs)
}
