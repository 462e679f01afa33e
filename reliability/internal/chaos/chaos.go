// Package chaos is what the reliability tests and their helper process
// (reliability/internal/chaosnode) share: opening a database of a dialect,
// the outbox store on a table, the event type they deliver, and the
// deliveries table in which the listener records every delivery inside its
// own transaction.
package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
	"github.com/outboxkit/outbox/txctx"
)

// The event the crash scenario writes and delivers.
const (
	Aggregate = core.AggregateName("Chaos")
	EventType = core.EventName("Tick")
)

// Open returns a pool on dsn for dialect ("sqlite": dsn is a file path).
func Open(dialect, dsn string) (*sql.DB, error) {
	switch dialect {
	case "postgres":
		return postgres.Open(dsn)
	case "mysql":
		return mysql.Open(dsn)
	case "sqlite":
		return sqlite.Open(dsn)
	}
	return nil, fmt.Errorf("unknown dialect %q", dialect)
}

// NewStore returns the outbox store of dialect on table.
func NewStore(dialect, table string) (store.SchemaManager, error) {
	var (
		s   store.SchemaManager
		err error
	)
	switch dialect {
	case "postgres":
		s, err = postgres.New(postgres.Config{Table: table})
	case "mysql":
		s, err = mysql.New(mysql.Config{Table: table})
	case "sqlite":
		s, err = sqlite.New(sqlite.Config{Table: table})
	default:
		return nil, fmt.Errorf("unknown dialect %q", dialect)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Deliveries is the table in which a listener counts its deliveries: one row
// per event id, n incremented on every delivery, written in the listener's
// own transaction so that a delivery counts only if it committed.
type Deliveries struct {
	dialect, table string
}

// NewDeliveries validates table and returns the deliveries table of dialect.
func NewDeliveries(dialect, table string) (Deliveries, error) {
	if !identRE.MatchString(table) {
		return Deliveries{}, fmt.Errorf("deliveries table %q is not a plain identifier", table)
	}
	switch dialect {
	case "postgres", "mysql", "sqlite":
	default:
		return Deliveries{}, fmt.Errorf("unknown dialect %q", dialect)
	}
	return Deliveries{dialect: dialect, table: table}, nil
}

// Table returns the table name.
func (d Deliveries) Table() string { return d.table }

// Create creates the table if it does not exist.
func (d Deliveries) Create(ctx context.Context, db core.DBTX) error {
	q := "CREATE TABLE IF NOT EXISTS " + d.table + " (event_id VARCHAR(36) NOT NULL PRIMARY KEY, n INT NOT NULL, last_owner VARCHAR(128) NOT NULL)"
	if d.dialect == "mysql" {
		q += " ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin"
	}
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("create deliveries table: %w", err)
	}
	return nil
}

// Drop drops the table.
func (d Deliveries) Drop(ctx context.Context, db core.DBTX) error {
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+d.table); err != nil {
		return fmt.Errorf("drop deliveries table: %w", err)
	}
	return nil
}

// Record counts one delivery of id by owner, on tx.
func (d Deliveries) Record(ctx context.Context, tx core.DBTX, id, owner string) error {
	var q string
	switch d.dialect {
	case "postgres":
		q = "INSERT INTO " + d.table + " AS d (event_id, n, last_owner) VALUES ($1, 1, $2) " +
			"ON CONFLICT (event_id) DO UPDATE SET n = d.n + 1, last_owner = EXCLUDED.last_owner"
	case "mysql":
		q = "INSERT INTO " + d.table + " (event_id, n, last_owner) VALUES (?, 1, ?) " +
			"ON DUPLICATE KEY UPDATE n = n + 1, last_owner = VALUES(last_owner)"
	default:
		q = "INSERT INTO " + d.table + " (event_id, n, last_owner) VALUES (?, 1, ?) " +
			"ON CONFLICT (event_id) DO UPDATE SET n = n + 1, last_owner = excluded.last_owner"
	}
	if _, err := tx.ExecContext(ctx, q, id, owner); err != nil {
		return fmt.Errorf("record delivery: %w", err)
	}
	return nil
}

// Summary is what the deliveries table says once a run is over.
type Summary struct {
	Events     int // distinct event ids delivered
	Deliveries int // deliveries in all
	Duplicated int // events delivered more than once
}

// Extra returns the deliveries beyond one per event.
func (s Summary) Extra() int { return s.Deliveries - s.Events }

// Summarize reads the table.
func (d Deliveries) Summarize(ctx context.Context, db core.DBTX) (Summary, error) {
	var s Summary
	var total, dup sql.NullInt64
	err := db.QueryRowContext(ctx, "SELECT COUNT(*), SUM(n), SUM(CASE WHEN n > 1 THEN 1 ELSE 0 END) FROM "+d.table).
		Scan(&s.Events, &total, &dup)
	if err != nil {
		return s, fmt.Errorf("summarize deliveries: %w", err)
	}
	s.Deliveries, s.Duplicated = int(total.Int64), int(dup.Int64)
	return s, nil
}

// Lost counts the rows of the outbox table that have no delivery.
func (d Deliveries) Lost(ctx context.Context, db core.DBTX, outbox string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+outbox+" o LEFT JOIN "+d.table+
		" d ON d.event_id = o.event_id WHERE d.event_id IS NULL").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count undelivered events: %w", err)
	}
	return n, nil
}

// Strays counts deliveries of ids that the outbox table does not hold.
func (d Deliveries) Strays(ctx context.Context, db core.DBTX, outbox string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+d.table+" d LEFT JOIN "+outbox+
		" o ON o.event_id = d.event_id WHERE o.event_id IS NULL").Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count stray deliveries: %w", err)
	}
	return n, nil
}

// StatusCounts returns the rows of the outbox table by status.
func StatusCounts(ctx context.Context, db core.DBTX, outbox string) (map[core.Status]int, error) {
	rows, err := db.QueryContext(ctx, "SELECT status, COUNT(*) FROM "+outbox+" GROUP BY status")
	if err != nil {
		return nil, fmt.Errorf("count rows by status: %w", err)
	}
	defer rows.Close()
	out := map[core.Status]int{}
	for rows.Next() {
		var st int16
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, fmt.Errorf("count rows by status: %w", err)
		}
		out[core.Status(st)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count rows by status: %w", err)
	}
	return out, nil
}

// LeasedBy counts the undelivered rows leased by owner.
func LeasedBy(ctx context.Context, db core.DBTX, dialect, outbox, owner string) (int, error) {
	q := "SELECT COUNT(*) FROM " + outbox + " WHERE locked_by = ? AND status IN (0, 2)"
	if dialect == "postgres" {
		q = "SELECT COUNT(*) FROM " + outbox + " WHERE locked_by = $1 AND status IN (0, 2)"
	}
	var n int
	if err := db.QueryRowContext(ctx, q, owner).Scan(&n); err != nil {
		return 0, fmt.Errorf("count leased rows: %w", err)
	}
	return n, nil
}

// Backoff is the retry delay the helper processes use: short, so that the
// runs are about failures and not about waiting.
func Backoff() core.RetryPolicy {
	return &core.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 200 * time.Millisecond}
}

// WriteWithRetry commits envs through w in one business transaction begun by
// txm, retrying failed attempts with the same event ids for up to a minute,
// each attempt bounded by 10 s, as an application would. A retry that finds
// the ids already there means that an earlier COMMIT succeeded although the
// client saw an error: the write is done, and ambiguous reports it.
func WriteWithRetry(txm *txctx.Manager, w *core.Writer, envs []core.Envelope) (retries int, ambiguous bool, err error) {
	deadline := time.Now().Add(time.Minute)
	backoff := 20 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = txm.Do(ctx, func(ctx context.Context) error {
			_, err := w.WriteAll(ctx, envs)
			return err
		})
		cancel()
		switch {
		case err == nil:
			return retries, false, nil
		case retries > 0 && errors.Is(err, core.ErrDuplicateEvent):
			return retries, true, nil
		case time.Now().After(deadline):
			return retries, false, fmt.Errorf("write %d events: giving up after %d retries: %w", len(envs), retries, err)
		}
		retries++
		time.Sleep(backoff) // back off before the next attempt, as an application would
		backoff = min(2*backoff, time.Second)
	}
}
