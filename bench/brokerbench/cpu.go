package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux the project runs on).
const clockTick = 10 * time.Millisecond

// cpuUse is the CPU time, user plus system, this process and the broker's
// server process used. server is negative when the server process was not
// found (another machine, several candidates, not Linux).
type cpuUse struct {
	self, server time.Duration
}

// add sums two uses; a zero cpuUse is the start of a sum.
func (u cpuUse) add(v cpuUse) cpuUse {
	if u == (cpuUse{}) {
		return v
	}
	d := cpuUse{self: u.self + v.self, server: -1}
	if u.server >= 0 && v.server >= 0 {
		d.server = u.server + v.server
	}
	return d
}

func (u cpuUse) sub(v cpuUse) cpuUse {
	d := cpuUse{self: u.self - v.self, server: -1}
	if u.server >= 0 && v.server >= 0 {
		d.server = u.server - v.server
	}
	return d
}

// perMsg formats the use as microseconds per message: "bench / server".
func (u cpuUse) perMsg(n int) string {
	us := func(d time.Duration) string {
		return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)/float64(n))
	}
	if u.server < 0 {
		return us(u.self) + " / ?"
	}
	return us(u.self) + " / " + us(u.server)
}

// cpuMeter reads cpuUse for this process and the server process pid (0:
// none).
type cpuMeter struct{ pid int }

func (m cpuMeter) read() cpuUse {
	self, _ := procCPU("self")
	u := cpuUse{self: self, server: -1}
	if m.pid > 0 {
		if d, err := procCPU(strconv.Itoa(m.pid)); err == nil {
			u.server = d
		}
	}
	return u
}

// procCPU returns utime+stime of /proc/<pid>/stat.
func procCPU(pid string) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return 0, err
	}
	// The command (field 2) is in parentheses and may hold spaces: the
	// fields counted from 3 start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%s/stat: no command", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%s/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%s/stat: bad times", pid)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// findProcess returns the pid of the one process whose command name is
// comm, or 0 when there is none or more than one (the bench then cannot
// tell which one serves it).
func findProcess(comm string) int {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	found := 0
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm"))
		if err != nil || strings.TrimSpace(string(b)) != comm {
			continue
		}
		if found != 0 {
			return 0
		}
		found = pid
	}
	return found
}

// loadAvg returns the first three fields of /proc/loadavg, or "?".
func loadAvg() string {
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

// claimCounter counts the claims of the store it wraps and the events they
// returned, to show how the poller's batches come out under each listener.
type claimCounter struct {
	core.Store
	claims, events atomic.Int64
}

func (c *claimCounter) Claim(ctx context.Context, db core.DBTX, p core.ClaimParams) ([]core.Event, []core.RowError, error) {
	evs, bad, err := c.Store.Claim(ctx, db, p)
	if len(evs)+len(bad) > 0 {
		c.claims.Add(1)
		c.events.Add(int64(len(evs) + len(bad)))
	}
	return evs, bad, err
}

// Unwrap keeps the wrapped store's optional capabilities (core.StoreAs).
func (c *claimCounter) Unwrap() core.Store { return c.Store }
