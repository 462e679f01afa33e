package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/procstat"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
)

// target is one database the workloads run on.
type target struct {
	name string // "sqlite", "postgres" or "mysql"
	// open returns a new pool, as a separate process would have; conns caps
	// its connections (ignored by SQLite, whose pool has one).
	open func(conns int) (*sql.DB, error)
	// openPgx, PostgreSQL only: a pgx pool of conns connections on the
	// same server, for the runs on pgx (pgxtx and pgxpool).
	openPgx  func(ctx context.Context, conns int) (*pgxpool.Pool, error)
	newStore func(table string, o core.Ordering) (store.SchemaManager, error)
	// pending is the condition selecting NEW and RETRY rows that the
	// dialect's claim index serves.
	pending string
	// numbered: $1 bind markers instead of '?'.
	numbered bool
	// encodeTime converts a time to a bind argument for raw SQL.
	encodeTime func(time.Time) any
	// analyze refreshes the planner statistics of a table ("" when not needed).
	analyze string
	// serverPIDs lists the database server's processes that serve the
	// bench, whose CPU time the runs report when they run on this machine:
	// on PostgreSQL the backends of the bench's connections, on MariaDB the
	// whole server (other clients included); nil for SQLite, which runs
	// inside the bench.
	serverPIDs func() []int
	cleanup    func()
	// partitioned: PostgreSQL stores on partitioned tables (-partitioned,
	// -w part).
	partitioned bool
	// sqlitePath is the SQLite database file, which W5's processes share.
	sqlitePath string
}

// cpuUse is CPU time used by the bench process and by the database
// server's processes that serve it, per process (nil: unknown, or SQLite,
// which runs inside the bench).
type cpuUse struct {
	self   time.Duration
	server map[int]time.Duration
}

// cpu reads the CPU time used so far by this process and tg's server.
func (tg *target) cpu() cpuUse {
	u := cpuUse{self: cpuTime()}
	if tg.serverPIDs == nil {
		return u
	}
	for _, pid := range tg.serverPIDs() {
		t, err := procstat.Read(strconv.Itoa(pid))
		if err != nil {
			continue // exited meanwhile
		}
		if u.server == nil {
			u.server = map[int]time.Duration{}
		}
		u.server[pid] = t.Self + t.Children
	}
	return u
}

// since returns the CPU time used between u and now, as seconds for a
// result: bench, then server (-1 when unknown). A server process that
// appeared meanwhile (a new connection's backend) counts from zero; one
// that exited meanwhile is lost, which the bench's pools, open for the
// whole of a run, avoid.
func (tg *target) since(u cpuUse) (self, server float64) {
	now := tg.cpu()
	self = (now.self - u.self).Seconds()
	if now.server == nil || u.server == nil {
		return self, -1
	}
	var d time.Duration
	for pid, t := range now.server {
		d += t - u.server[pid]
	}
	return self, d.Seconds()
}

// pgBackends returns a serverPIDs for PostgreSQL: the backends of this
// bench's connections, found by their application_name (PGAPPNAME, which
// the bench sets to one of its own when it is not set), or none when they
// cannot be read (the server on another machine, an application_name set
// in the DSN).
func pgBackends(dsn string) func() []int {
	var once sync.Once
	var db *sql.DB
	return func() []int {
		once.Do(func() {
			if d, err := postgres.Open(dsn); err == nil {
				d.SetMaxOpenConns(1)
				db = d
			}
		})
		if db == nil {
			return nil
		}
		return procstat.PGBackends(context.Background(), db, os.Getenv("PGAPPNAME"))
	}
}

// uniqueName returns a table name no other run uses.
func uniqueName(kind string) string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return "bench_" + kind + "_" + hex.EncodeToString(b[:])
}

// rebind turns '?' markers into $n for numbered dialects.
func (tg *target) rebind(q string) string {
	if !tg.numbered {
		return q
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// sqliteTimeFormat is how the SQLite store stores timestamps.
const sqliteTimeFormat = "2006-01-02T15:04:05.000000Z"

func utcMicro(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// targets returns the databases named in list whose servers are configured;
// a server named but not configured is skipped with a note.
func targets(list string) ([]*target, error) {
	var out []*target
	for name := range strings.SplitSeq(list, ",") {
		switch strings.TrimSpace(name) {
		case "sqlite":
			tg, err := sqliteTarget()
			if err != nil {
				return nil, err
			}
			out = append(out, tg)
		case "postgres":
			dsn := os.Getenv("OUTBOX_POSTGRES_DSN")
			if dsn == "" {
				fmt.Println("note: OUTBOX_POSTGRES_DSN is not set; skipping PostgreSQL")
				continue
			}
			if os.Getenv("PGAPPNAME") == "" {
				_ = os.Setenv("PGAPPNAME", fmt.Sprintf("outbox-bench-%d", os.Getpid()))
			}
			out = append(out, &target{
				name: "postgres",
				open: func(conns int) (*sql.DB, error) {
					db, err := postgres.Open(dsn)
					return pooled(db, conns), err
				},
				openPgx: func(ctx context.Context, conns int) (*pgxpool.Pool, error) {
					cfg, err := pgxpool.ParseConfig(dsn)
					if err != nil {
						return nil, err
					}
					cfg.MaxConns = int32(conns)
					return pgxpool.NewWithConfig(ctx, cfg)
				},
				newStore: func(table string, o core.Ordering) (store.SchemaManager, error) {
					return postgres.New(postgres.Config{Table: table, Ordered: o})
				},
				pending: "status IN (0, 2)", numbered: true,
				encodeTime: func(t time.Time) any { return utcMicro(t) },
				analyze:    "ANALYZE %s",
				serverPIDs: pgBackends(dsn),
			})
		case "mysql":
			dsn := os.Getenv("OUTBOX_MYSQL_DSN")
			if dsn == "" {
				fmt.Println("note: OUTBOX_MYSQL_DSN is not set; skipping MySQL/MariaDB")
				continue
			}
			out = append(out, &target{
				name: "mysql",
				open: func(conns int) (*sql.DB, error) {
					db, err := mysql.Open(dsn)
					return pooled(db, conns), err
				},
				newStore: func(table string, o core.Ordering) (store.SchemaManager, error) {
					return mysql.New(mysql.Config{Table: table, Ordered: o})
				},
				pending:    "lane = 0",
				encodeTime: func(t time.Time) any { return utcMicro(t) },
				analyze:    "ANALYZE TABLE %s",
				serverPIDs: func() []int { return procstat.Named("mariadbd", "mysqld") },
			})
		case "":
		default:
			return nil, fmt.Errorf("unknown database %q (want sqlite, postgres or mysql)", name)
		}
	}
	return out, nil
}

func pooled(db *sql.DB, conns int) *sql.DB {
	if db != nil && conns > 0 {
		db.SetMaxOpenConns(conns)
		db.SetMaxIdleConns(conns)
	}
	return db
}

func sqliteTarget() (*target, error) {
	dir, err := os.MkdirTemp("", "outbox-bench-")
	if err != nil {
		return nil, err
	}
	tg := sqliteTargetAt(filepath.Join(dir, "bench.db"))
	tg.cleanup = func() { _ = os.RemoveAll(dir) }
	return tg, nil
}

// sqliteTargetAt returns the SQLite target on the database file path, which
// the caller removes.
func sqliteTargetAt(path string) *target {
	return &target{
		name:       "sqlite",
		sqlitePath: path,
		open:       func(int) (*sql.DB, error) { return sqlite.Open(path) },
		newStore: func(table string, o core.Ordering) (store.SchemaManager, error) {
			return sqlite.New(sqlite.Config{Table: table, Ordered: o})
		},
		pending:    "status IN (0, 2)",
		encodeTime: func(t time.Time) any { return t.UTC().Format(sqliteTimeFormat) },
	}
}

// describe returns the server version and its durability settings.
func (tg *target) describe(ctx context.Context, db *sql.DB) (version string, settings []string, err error) {
	var queries []string
	switch tg.name {
	case "sqlite":
		if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&version); err != nil {
			return "", nil, err
		}
		version = "SQLite " + version + " (modernc.org/sqlite)"
		queries = []string{"PRAGMA journal_mode", "PRAGMA synchronous"}
	case "postgres":
		if err := db.QueryRowContext(ctx, "SHOW server_version").Scan(&version); err != nil {
			return "", nil, err
		}
		version = "PostgreSQL " + version
		for _, s := range []string{"synchronous_commit", "fsync", "wal_sync_method", "full_page_writes", "commit_delay",
			"autovacuum", "shared_buffers", "max_connections"} {
			queries = append(queries, "SHOW "+s)
		}
	case "mysql":
		if err := db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
			return "", nil, err
		}
		rows, err := db.QueryContext(ctx, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ("+
			"'innodb_flush_log_at_trx_commit', 'sync_binlog', 'log_bin', 'innodb_flush_method', "+
			"'innodb_doublewrite', 'innodb_buffer_pool_size', 'max_connections')")
		if err != nil {
			return "", nil, err
		}
		defer rows.Close()
		for rows.Next() {
			var k, v string
			if err := rows.Scan(&k, &v); err != nil {
				return "", nil, err
			}
			settings = append(settings, k+"="+v)
		}
		return version, settings, rows.Err()
	}
	for _, q := range queries {
		var v string
		if err := db.QueryRowContext(ctx, q).Scan(&v); err != nil {
			return "", nil, fmt.Errorf("%s: %w", q, err)
		}
		name := strings.TrimPrefix(strings.TrimPrefix(q, "SHOW "), "PRAGMA ")
		if tg.name == "sqlite" && name == "synchronous" {
			v = map[string]string{"0": "OFF", "1": "NORMAL", "2": "FULL", "3": "EXTRA"}[v] + " (" + v + ")"
		}
		settings = append(settings, name+"="+v)
	}
	return version, settings, nil
}
