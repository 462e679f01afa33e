package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// w5Sampler samples, during an ordered W5 run (-w5-sample), what the
// database's sessions of the run are doing: on PostgreSQL pg_stat_activity
// (state, wait event, statement, time since the last state change) and,
// for each session waiting for a lock, the state and statement of the
// sessions it waits for (pg_blocking_pids); on MySQL/MariaDB the lock waits
// of information_schema.INNODB_LOCK_WAITS with the blocking transaction's
// connection (its command, "Sleep" when the client holds the transaction
// open between statements) and the running statements of PROCESSLIST. It
// prints the tallies once the run is over.
type w5Sampler struct {
	tg      *target
	db      *sql.DB
	every   time.Duration
	done    chan struct{}
	exited  chan struct{}
	samples int
	errs    int
	lastErr error
	// states counts sessions by state and statement (per sample);
	// waits counts lock waits by waiter's statement and blocker's state and
	// statement; idleAge collects, per statement, how long sessions had sat
	// idle in a transaction after it when sampled (MySQL: the blockers idle
	// in a transaction, whose last statement it does not show).
	states  map[string]int
	waits   map[string]int
	idleAge map[string][]time.Duration
	// rowLocks: MySQL's Innodb_row_lock_waits and Innodb_row_lock_time
	// (ms) at the start and at the end of the run (the whole server's).
	rowLocks [2][2]int64
}

func startW5Sampler(ctx context.Context, tg *target, every time.Duration) *w5Sampler {
	s := &w5Sampler{tg: tg, every: every, done: make(chan struct{}), exited: make(chan struct{}),
		states: map[string]int{}, waits: map[string]int{}, idleAge: map[string][]time.Duration{}}
	db, err := tg.open(1)
	if err != nil {
		s.lastErr = err
		close(s.exited)
		return s
	}
	s.db = db
	if tg.name == "mysql" {
		s.rowLocks[0] = innodbRowLocks(ctx, db)
	}
	go func() { // owned: stop waits for exited
		defer close(s.exited)
		defer db.Close()
		if tg.name == "mysql" {
			defer func() { s.rowLocks[1] = innodbRowLocks(ctx, db) }()
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
			}
			var err error
			switch tg.name {
			case "postgres":
				err = s.samplePostgres(ctx)
			case "mysql":
				err = s.sampleMySQL(ctx)
			default:
				return
			}
			s.samples++
			if err != nil {
				s.errs++
				s.lastErr = err
			}
		}
	}()
	return s
}

func (s *w5Sampler) stop() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	<-s.exited
}

var benchTableRE = regexp.MustCompile(`"?bench_[a-z0-9]+_[0-9a-f]+(_key)?"?`)

// stmt returns the first words of q with the run's table names replaced,
// so that the statements of a kind count together.
func stmt(q string) string {
	q = benchTableRE.ReplaceAllStringFunc(q, func(t string) string {
		switch {
		case strings.HasSuffix(strings.Trim(t, `"`), "_key"):
			return "KEYS"
		case strings.Contains(t, "w5agg"):
			return "AGG"
		}
		return "EVENTS"
	})
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 60 {
		q = q[:60]
	}
	if q == "" {
		q = "(none)"
	}
	return q
}

func (s *w5Sampler) samplePostgres(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT a.pid, COALESCE(a.state, ''), COALESCE(a.wait_event_type, ''), COALESCE(a.wait_event, ''), COALESCE(a.query, ''),
		COALESCE((EXTRACT(EPOCH FROM clock_timestamp() - a.state_change) * 1e6)::bigint, 0), pg_blocking_pids(a.pid)::text
		FROM pg_stat_activity a WHERE a.application_name = $1 AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'`,
		os.Getenv("PGAPPNAME"))
	if err != nil {
		return err
	}
	defer rows.Close()
	type sess struct {
		state, wait, stmt string
		since             time.Duration
		blockers          []int
	}
	byPID := map[int]sess{}
	for rows.Next() {
		var pid int
		var st, wt, we, q, blockers string
		var sinceUs int64
		if err := rows.Scan(&pid, &st, &wt, &we, &q, &sinceUs, &blockers); err != nil {
			return err
		}
		x := sess{state: st, stmt: stmt(q), since: time.Duration(sinceUs) * time.Microsecond}
		if wt != "" {
			x.wait = wt + ":" + we
		}
		for _, f := range strings.FieldsFunc(strings.Trim(blockers, "{}"), func(r rune) bool { return r == ',' }) {
			if b, err := strconv.Atoi(f); err == nil {
				x.blockers = append(x.blockers, b)
			}
		}
		byPID[pid] = x
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, x := range byPID {
		if x.state == "idle" {
			continue
		}
		k := x.state
		if x.wait != "" && x.wait != "Client:ClientRead" {
			k += " [" + x.wait + "]"
		}
		s.states[k+" | "+x.stmt]++
		if x.state == "idle in transaction" {
			s.idleAge[x.stmt] = append(s.idleAge[x.stmt], x.since)
		}
		for _, b := range x.blockers {
			bs, ok := byPID[b]
			blocker := "another client's session"
			if ok {
				blocker = bs.state + " | " + bs.stmt
			}
			s.waits[x.stmt+"  <=  "+blocker]++
		}
	}
	return nil
}

func (s *w5Sampler) sampleMySQL(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT COALESCE(r.trx_query, ''), COALESCE(b.trx_query, ''), COALESCE(bp.COMMAND, ''),
		COALESCE(bp.TIME_MS, 0)
		FROM information_schema.INNODB_LOCK_WAITS w
		JOIN information_schema.INNODB_TRX r ON r.trx_id = w.requesting_trx_id
		JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id
		LEFT JOIN information_schema.PROCESSLIST bp ON bp.ID = b.trx_mysql_thread_id
		WHERE r.trx_query LIKE '%bench\_w5%'`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var rq, bq, bcmd string
		var idleMs float64
		if err := rows.Scan(&rq, &bq, &bcmd, &idleMs); err != nil {
			rows.Close()
			return err
		}
		blocker := bcmd + " | " + stmt(bq)
		if bq == "" && bcmd == "Sleep" {
			// The client holds the transaction open between statements.
			blocker = "idle in transaction (Sleep)"
			s.idleAge[blocker] = append(s.idleAge[blocker], time.Duration(idleMs*float64(time.Millisecond)))
		}
		s.waits[stmt(rq)+"  <=  "+blocker]++
	}
	if err := rows.Close(); err != nil {
		return err
	}
	rows, err = s.db.QueryContext(ctx, `SELECT COMMAND, COALESCE(STATE, ''), COALESCE(INFO, '') FROM information_schema.PROCESSLIST
		WHERE INFO LIKE '%bench\_w5%' AND ID <> CONNECTION_ID()`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var cmd, state, info string
		if err := rows.Scan(&cmd, &state, &info); err != nil {
			return err
		}
		s.states[cmd+" ["+state+"] | "+stmt(info)]++
	}
	return rows.Err()
}

// innodbRowLocks returns the server's Innodb_row_lock_waits and
// Innodb_row_lock_time (ms), or zeros if they cannot be read.
func innodbRowLocks(ctx context.Context, db *sql.DB) [2]int64 {
	var out [2]int64
	rows, err := db.QueryContext(ctx, "SHOW GLOBAL STATUS WHERE Variable_name IN ('Innodb_row_lock_waits', 'Innodb_row_lock_time')")
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var v int64
		if rows.Scan(&k, &v) != nil {
			continue
		}
		if k == "Innodb_row_lock_waits" {
			out[0] = v
		} else {
			out[1] = v
		}
	}
	return out
}

// print prints the tallies, largest first.
func (s *w5Sampler) print() {
	fmt.Printf("      sampled every %s: %d samples (%d failed", s.every, s.samples, s.errs)
	if s.lastErr != nil {
		fmt.Printf(", last error: %v", s.lastErr)
	}
	fmt.Println(")")
	top := func(title string, m map[string]int) {
		type kv struct {
			k string
			n int
		}
		var all []kv
		for k, n := range m {
			all = append(all, kv{k, n})
		}
		slices.SortFunc(all, func(a, b kv) int { return cmp.Or(cmp.Compare(b.n, a.n), strings.Compare(a.k, b.k)) })
		fmt.Printf("      %s (mean sessions per sample):\n", title)
		for _, x := range all[:min(len(all), 12)] {
			fmt.Printf("        %6.2f  %s\n", float64(x.n)/float64(max(s.samples, 1)), x.k)
		}
	}
	if w := s.rowLocks[1][0] - s.rowLocks[0][0]; s.tg.name == "mysql" && s.rowLocks[1] != [2]int64{} {
		fmt.Printf("      InnoDB row lock waits during the run (the whole server, other clients included): %d, %.1f s in all\n",
			w, float64(s.rowLocks[1][1]-s.rowLocks[0][1])/1000)
	}
	top("sessions by state | statement (the last one, when idle in a transaction)", s.states)
	top("lock waits: waiting statement  <=  blocking session's state | statement", s.waits)
	if len(s.idleAge) > 0 {
		fmt.Println("      idle in transaction, time since the statement ended when sampled (p50 / p99 / max ms, samples):")
		var keys []string
		for k := range s.idleAge {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			d := s.idleAge[k]
			slices.Sort(d)
			fmt.Printf("        %7.1f / %7.1f / %7.1f  (%d)  %s\n", ms(percentile(d, 0.5)), ms(percentile(d, 0.99)), ms(percentile(d, 1)), len(d), k)
		}
	}
}
