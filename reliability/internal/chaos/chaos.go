// Package chaos is what the reliability tests and their helper processes
// (reliability/internal/chaosnode and relaynode) share: opening a database
// of a dialect, the outbox store on a table, the event type they deliver,
// the deliveries table in which the listener records every delivery inside
// its own transaction, and the helpers' common command line (Node).
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
	return NewOrderedStore(dialect, table, nil)
}

// NewOrderedStore returns the outbox store of dialect on table, delivering
// the aggregate types of ordered in order per key.
func NewOrderedStore(dialect, table string, ordered core.Ordering) (store.SchemaManager, error) {
	var (
		s   store.SchemaManager
		err error
	)
	switch dialect {
	case "postgres":
		s, err = postgres.New(postgres.Config{Table: table, Ordered: ordered})
	case "mysql":
		s, err = mysql.New(mysql.Config{Table: table, Ordered: ordered})
	case "sqlite":
		s, err = sqlite.New(sqlite.Config{Table: table, Ordered: ordered})
	default:
		return nil, fmt.Errorf("unknown dialect %q", dialect)
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// OrderedDelivery is a recorded delivery with its event's key and position.
type OrderedDelivery struct {
	Delivery
	AggregateID string
	Seq         int64
}

// AllOrdered returns every delivery recorded in d, joined with its event in
// outbox for its key and seq, in the order the deliveries started.
func (d Deliveries) AllOrdered(ctx context.Context, db core.DBTX, outbox string) ([]OrderedDelivery, error) {
	rows, err := db.QueryContext(ctx, "SELECT d.event_id, d.owner, d.started_ns, d.finished_ns, e.aggregate_id, e.seq FROM "+
		d.table+" d JOIN "+outbox+" e ON e.event_id = d.event_id ORDER BY d.started_ns")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []OrderedDelivery
	for rows.Next() {
		var o OrderedDelivery
		var started, finished int64
		if err := rows.Scan(&o.EventID, &o.Owner, &started, &finished, &o.AggregateID, &o.Seq); err != nil {
			return nil, err
		}
		o.Started, o.Finished = time.Unix(0, started), time.Unix(0, finished)
		out = append(out, o)
	}
	return out, rows.Err()
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// Deliveries is the table in which a listener records its deliveries: one
// row per delivery with the owner of the process that made it and when the
// listener started and finished, written in the listener's own transaction so
// that a delivery counts only if it committed. Times are Unix nanoseconds of
// the wall clock, which the processes of one machine share.
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

// Create creates the table if it does not exist. An owner starts one
// delivery of an event at a time, so (event, owner, start) is a key.
func (d Deliveries) Create(ctx context.Context, db core.DBTX) error {
	q := "CREATE TABLE IF NOT EXISTS " + d.table + " (event_id VARCHAR(36) NOT NULL, owner VARCHAR(128) NOT NULL, " +
		"started_ns BIGINT NOT NULL, finished_ns BIGINT NOT NULL, PRIMARY KEY (event_id, owner, started_ns))"
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

// Record records one delivery of id by owner, which the listener started
// and finished at the given times, on tx.
func (d Deliveries) Record(ctx context.Context, tx core.DBTX, id, owner string, started, finished time.Time) error {
	q := "INSERT INTO " + d.table + " (event_id, owner, started_ns, finished_ns) VALUES (?, ?, ?, ?)"
	if d.dialect == "postgres" {
		q = "INSERT INTO " + d.table + " (event_id, owner, started_ns, finished_ns) VALUES ($1, $2, $3, $4)"
	}
	if _, err := tx.ExecContext(ctx, q, id, owner, started.UnixNano(), finished.UnixNano()); err != nil {
		return fmt.Errorf("record delivery: %w", err)
	}
	return nil
}

// All returns every recorded delivery, ordered by event and start.
func (d Deliveries) All(ctx context.Context, db core.DBTX) ([]Delivery, error) {
	rows, err := db.QueryContext(ctx, "SELECT event_id, owner, started_ns, finished_ns FROM "+d.table+
		" ORDER BY event_id, started_ns")
	if err != nil {
		return nil, fmt.Errorf("read deliveries: %w", err)
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		var dl Delivery
		var started, finished int64
		if err := rows.Scan(&dl.EventID, &dl.Owner, &started, &finished); err != nil {
			return nil, fmt.Errorf("read deliveries: %w", err)
		}
		dl.Started, dl.Finished = time.Unix(0, started), time.Unix(0, finished)
		out = append(out, dl)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read deliveries: %w", err)
	}
	return out, nil
}

// LastDeliverer returns the owner of the delivery that finished last, ""
// when there is none yet.
func (d Deliveries) LastDeliverer(ctx context.Context, db core.DBTX) (string, error) {
	var owner string
	err := db.QueryRowContext(ctx, "SELECT owner FROM "+d.table+" ORDER BY finished_ns DESC LIMIT 1").Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read the last delivery: %w", err)
	}
	return owner, nil
}

// Summary is what the deliveries table says once a run is over.
type Summary struct {
	Events     int // distinct event ids delivered
	Deliveries int // deliveries in all
	Duplicated int // events delivered more than once
}

// Extra returns the deliveries beyond one per event.
func (s Summary) Extra() int { return s.Deliveries - s.Events }

// Summarize counts the deliveries in ds.
func Summarize(ds []Delivery) Summary {
	per := map[string]int{}
	for _, d := range ds {
		per[d.EventID]++
	}
	s := Summary{Events: len(per), Deliveries: len(ds)}
	for _, n := range per {
		if n > 1 {
			s.Duplicated++
		}
	}
	return s
}

// Lost counts the rows of the outbox table that have no delivery.
func (d Deliveries) Lost(ctx context.Context, db core.DBTX, outbox string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+outbox+" o WHERE NOT EXISTS (SELECT 1 FROM "+d.table+
		" d WHERE d.event_id = o.event_id)").Scan(&n)
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

// LeasedIDs returns the ids of the undelivered rows (NEW or RETRY) leased
// by owner.
func LeasedIDs(ctx context.Context, db core.DBTX, dialect, outbox, owner string) ([]string, error) {
	q := "SELECT event_id FROM " + outbox + " WHERE locked_by = ? AND status IN (0, 2)"
	if dialect == "postgres" {
		q = "SELECT event_id FROM " + outbox + " WHERE locked_by = $1 AND status IN (0, 2)"
	}
	rows, err := db.QueryContext(ctx, q, owner)
	if err != nil {
		return nil, fmt.Errorf("list leased rows: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("list leased rows: %w", err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list leased rows: %w", err)
	}
	return ids, nil
}

// ExpiredLeases counts the undelivered rows (NEW or RETRY) whose lease was
// taken before cutoff and is still there: with cutoff = now - lease, the
// leases that have expired without being released.
func ExpiredLeases(ctx context.Context, db core.DBTX, dialect, outbox string, cutoff time.Time) (int, error) {
	q := "SELECT COUNT(*) FROM " + outbox + " WHERE locked_by IS NOT NULL AND status IN (0, 2) AND locked_at < ?"
	if dialect == "postgres" {
		q = "SELECT COUNT(*) FROM " + outbox + " WHERE locked_by IS NOT NULL AND status IN (0, 2) AND locked_at < $1"
	}
	var n int
	if err := db.QueryRowContext(ctx, q, cutoff.UTC()).Scan(&n); err != nil {
		return 0, fmt.Errorf("count expired leases: %w", err)
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
