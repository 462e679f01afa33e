package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/procstat"
)

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux the project runs on).
const clockTick = 10 * time.Millisecond

// cpuUse is the CPU time, user plus system, this process and the broker's
// server process used, and the outbox database's server processes serving
// this process (PostgreSQL backends). server is negative when the server
// process was not found (another machine, several candidates, not Linux);
// db is negative when not measured (SQLite runs in this process).
type cpuUse struct {
	self, server, db time.Duration
}

// add sums two uses; a zero cpuUse is the start of a sum.
func (u cpuUse) add(v cpuUse) cpuUse {
	if u == (cpuUse{}) {
		return v
	}
	d := cpuUse{self: u.self + v.self, server: -1, db: -1}
	if u.server >= 0 && v.server >= 0 {
		d.server = u.server + v.server
	}
	if u.db >= 0 && v.db >= 0 {
		d.db = u.db + v.db
	}
	return d
}

func (u cpuUse) sub(v cpuUse) cpuUse {
	d := cpuUse{self: u.self - v.self, server: -1, db: -1}
	if u.server >= 0 && v.server >= 0 {
		d.server = u.server - v.server
	}
	if u.db >= 0 && v.db >= 0 {
		d.db = u.db - v.db
	}
	return d
}

// perMsg formats the use as microseconds per message: "bench / server",
// and " / database" when the database's was measured.
func (u cpuUse) perMsg(n int) string {
	us := func(d time.Duration) string {
		return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)/float64(n))
	}
	s := us(u.self) + " / ?"
	if u.server >= 0 {
		s = us(u.self) + " / " + us(u.server)
	}
	if u.db >= 0 {
		s += " / " + us(u.db)
	}
	return s
}

// cpuMeter reads cpuUse for this process, the server process pid (0: none)
// and the database server processes dbPIDs returns (nil: not measured).
type cpuMeter struct {
	pid    int
	dbPIDs func() []int
}

// procSelfCPU returns the user plus system CPU time of process pid ("self"
// for this one).
func procSelfCPU(pid string) (time.Duration, error) {
	t, err := procstat.Read(pid)
	return t.Self, err
}

// findProcess returns the pid of the one process whose command name is
// comm, or 0 when there is none or more than one (the bench then cannot
// tell which one serves it).
func findProcess(comm string) int {
	if pids := procstat.Named(comm); len(pids) == 1 {
		return pids[0]
	}
	return 0
}

func (m cpuMeter) read() cpuUse {
	self, _ := procSelfCPU("self")
	u := cpuUse{self: self, server: -1, db: -1}
	if m.pid > 0 {
		if d, err := procSelfCPU(strconv.Itoa(m.pid)); err == nil {
			u.server = d
		}
	}
	if m.dbPIDs != nil {
		u.db = 0
		for _, pid := range m.dbPIDs() {
			if d, err := procSelfCPU(strconv.Itoa(pid)); err == nil {
				u.db += d
			}
		}
	}
	return u
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
