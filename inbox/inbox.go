// Package inbox makes a consumer's handling of broker messages take effect
// once per event id, whatever the broker redelivers.
//
// Delivery from an outbox through a broker is at-least-once: the outbox
// retries a publish whose acknowledgement it did not see, and a broker
// redelivers a message whose consumer did not acknowledge it. An Inbox
// records each event id a consumer handled in a table, inside the
// consumer's own transaction, together with the handler's changes: either
// both commit or neither does, and an id already recorded is not handled
// again. The message is acknowledged to the broker after the commit; a
// crash in between redelivers it, and the inbox absorbs the redelivery.
//
//	ib, err := inbox.New(inbox.Config{DB: db, Consumer: "billing"})
//	err = ib.CreateSchema(ctx)
//	applied, err := ib.Process(ctx, eventID, func(ctx context.Context, tx *sql.Tx) error {
//		_, err := tx.ExecContext(ctx, `UPDATE accounts SET ...`)
//		return err
//	})
//
// The table holds (consumer, event_id, received_at); several consumers share
// it, each with its own set of ids. Purge deletes a consumer's entries older
// than a cut-off: keep them longer than any redelivery can come (the broker's
// redelivery horizon and the producer's retry horizon).
//
// PostgreSQL (pgx), MySQL/MariaDB (go-sql-driver/mysql) and SQLite
// (modernc.org/sqlite) are supported; the dialect is found from the driver.
// The consume loops for NATS JetStream and RabbitMQ are in the broker
// modules (github.com/outboxkit/outbox/broker/jetstream and .../rabbitmq).
package inbox

import (
	"cmp"
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/internal/dbkind"
)

// Dialect names the SQL flavour of the inbox table.
type Dialect string

// The supported dialects.
const (
	Postgres Dialect = "postgres"
	MySQL    Dialect = "mysql"
	SQLite   Dialect = "sqlite"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultTable      = "inbox_message"
	DefaultPurgeBatch = 500
	// MaxEventIDLen is the longest event id the table holds.
	MaxEventIDLen = 128
	// MaxConsumerLen is the longest consumer name the table holds.
	MaxConsumerLen = 128
)

var (
	//go:embed schema/postgres.sql
	postgresDDL string
	//go:embed schema/mysql.sql
	mysqlDDL string
	//go:embed schema/sqlite.sql
	sqliteDDL string
)

// Config configures an Inbox.
type Config struct {
	// DB is the consumer's database: the inbox table lives beside the
	// tables its handlers change. Required.
	DB *sql.DB
	// Consumer names the consumer whose handled ids this inbox records;
	// two consumers of one event each handle it once. Required, at most
	// 128 bytes.
	Consumer string
	// Dialect is the database's SQL flavour. Default: found from DB's
	// driver (pgx's stdlib, go-sql-driver/mysql, modernc.org/sqlite); set it
	// for a driver that wraps one of those.
	Dialect Dialect
	// Table is the inbox table's name, optionally schema-qualified.
	// Default "inbox_message".
	Table string
	// PurgeBatch caps the rows one purge statement deletes. Default 500.
	PurgeBatch int
	// TxOptions are the options of the transactions Process begins.
	// Default: nil (the driver's default isolation level).
	TxOptions *sql.TxOptions
	// Now returns the current time, recorded as received_at. Default
	// time.Now.
	Now func() time.Time
}

var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

func (c Config) validate() error {
	if c.DB == nil {
		return core.Invalid("inbox config", "DB is required")
	}
	if err := checkText("consumer", c.Consumer, MaxConsumerLen); err != nil {
		return err
	}
	if c.Table != "" && !tableName.MatchString(c.Table) {
		return core.Invalid("table name", "%q must match %s", c.Table, tableName)
	}
	switch c.Dialect {
	case "", Postgres, MySQL, SQLite:
	default:
		return core.Invalid("inbox config", "unknown Dialect %q (postgres, mysql or sqlite)", c.Dialect)
	}
	if c.PurgeBatch < 0 {
		return core.Invalid("inbox config", "PurgeBatch %d is negative", c.PurgeBatch)
	}
	return nil
}

func checkText(field, s string, maxLen int) error {
	switch {
	case strings.TrimSpace(s) == "":
		return core.Invalid(field, "is empty")
	case len(s) > maxLen:
		return core.Invalid(field, "%d bytes exceeds the limit of %d", len(s), maxLen)
	case !utf8.ValidString(s) || strings.ContainsRune(s, 0):
		return core.Invalid(field, "is not valid UTF-8 text")
	}
	return nil
}

func (c Config) withDefaults() (Config, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	if c.Dialect == "" {
		// The driver's type names it (internal/dbkind, shared with
		// store.Detect); the inbox imports no driver, so that a broker
		// consumer built on it compiles only the driver the program uses.
		switch dbkind.Of(c.DB) {
		case dbkind.Postgres:
			c.Dialect = Postgres
		case dbkind.MySQL:
			c.Dialect = MySQL
		case dbkind.SQLite:
			c.Dialect = SQLite
		default:
			return c, core.Invalid("inbox config", "cannot tell the dialect of driver %s; set Dialect", dbkind.TypeName(c.DB.Driver()))
		}
	}
	c.Table = cmp.Or(c.Table, DefaultTable)
	c.PurgeBatch = cmp.Or(c.PurgeBatch, DefaultPurgeBatch)
	c.Now = config.Clock(c.Now)
	return c, nil
}

// Inbox records the event ids one consumer handled. It is safe for
// concurrent use.
type Inbox struct {
	cfg    Config
	ddl    string
	insert string
	seen   string
	purge  string
}

// New returns the inbox of cfg.Consumer on cfg.Table; it creates nothing
// (see CreateSchema). It returns an error matching core.ErrInvalid for a bad
// Config.
func New(cfg Config) (*Inbox, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	ib := &Inbox{cfg: cfg}
	q := quoter(cfg.Dialect)
	table := q(cfg.Table)
	indexName := strings.ReplaceAll(cfg.Table, ".", "_") + "_received_idx"
	if cfg.Dialect == Postgres || cfg.Dialect == SQLite {
		// An index lives in its table's schema: name it without one.
		if _, name, ok := strings.Cut(cfg.Table, "."); ok {
			indexName = name + "_received_idx"
		}
	}
	ddl := map[Dialect]string{Postgres: postgresDDL, MySQL: mysqlDDL, SQLite: sqliteDDL}[cfg.Dialect]
	ddl = strings.ReplaceAll(ddl, "{{table}}", table)
	ib.ddl = strings.ReplaceAll(ddl, "{{index:received}}", q(indexName))
	switch cfg.Dialect {
	case Postgres:
		ib.insert = `INSERT INTO ` + table + ` (consumer, event_id, received_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`
		ib.seen = `SELECT 1 FROM ` + table + ` WHERE consumer = $1 AND event_id = $2`
		ib.purge = `DELETE FROM ` + table + ` WHERE consumer = $1 AND event_id IN (SELECT event_id FROM ` + table +
			` WHERE consumer = $1 AND received_at < $2 LIMIT $3)`
	case MySQL:
		// INSERT IGNORE turns only the duplicate key into "0 rows"
		// here: the id's length is checked before, and the table has no
		// other constraint to ignore.
		ib.insert = `INSERT IGNORE INTO ` + table + ` (consumer, event_id, received_at) VALUES (?, ?, ?)`
		ib.seen = `SELECT 1 FROM ` + table + ` WHERE consumer = ? AND event_id = ?`
		ib.purge = `DELETE FROM ` + table + ` WHERE consumer = ? AND received_at < ? LIMIT ?`
	case SQLite:
		ib.insert = `INSERT INTO ` + table + ` (consumer, event_id, received_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`
		ib.seen = `SELECT 1 FROM ` + table + ` WHERE consumer = ? AND event_id = ?`
		ib.purge = `DELETE FROM ` + table + ` WHERE consumer = ? AND event_id IN (SELECT event_id FROM ` + table +
			` WHERE consumer = ? AND received_at < ? LIMIT ?)`
	}
	return ib, nil
}

func quoter(d Dialect) func(string) string {
	open, close := `"`, `"`
	if d == MySQL {
		open, close = "`", "`"
	}
	return func(name string) string {
		parts := strings.Split(name, ".")
		for i, p := range parts {
			parts[i] = open + p + close
		}
		return strings.Join(parts, ".")
	}
}

// Consumer returns the consumer name.
func (ib *Inbox) Consumer() string { return ib.cfg.Consumer }

// Table returns the inbox table's name.
func (ib *Inbox) Table() string { return ib.cfg.Table }

// Schema returns the DDL CreateSchema runs, for a migration tool.
func (ib *Inbox) Schema() string { return ib.ddl }

// CreateSchema creates the inbox table and its index if they do not exist.
func (ib *Inbox) CreateSchema(ctx context.Context) error {
	for stmt := range strings.SplitSeq(ib.ddl, ";") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		if _, err := ib.cfg.DB.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("inbox: create schema: %w", err)
		}
	}
	return nil
}

func stripComments(stmt string) string {
	var b strings.Builder
	for line := range strings.Lines(stmt) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return b.String()
}

func (ib *Inbox) timeArg(t time.Time) any {
	t = t.UTC().Truncate(time.Microsecond)
	if ib.cfg.Dialect == SQLite {
		return t.Format("2006-01-02T15:04:05.000000Z")
	}
	return t
}

// Record records eventID as handled by this consumer, inside tx (the
// consumer's transaction). It returns true the first time, and false when
// the id was recorded before: the caller then skips the event's effect and
// still commits or rolls back as it likes. A concurrent Record of the same id
// waits for the first transaction and returns false if it committed. It
// returns an error matching core.ErrInvalid for an empty or over-long id.
func (ib *Inbox) Record(ctx context.Context, tx core.DBTX, eventID string) (bool, error) {
	if err := checkText("event id", eventID, MaxEventIDLen); err != nil {
		return false, err
	}
	res, err := tx.ExecContext(ctx, ib.insert, ib.cfg.Consumer, eventID, ib.timeArg(ib.cfg.Now()))
	if err != nil {
		return false, fmt.Errorf("inbox: record %s: %w", eventID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: record %s: %w", eventID, err)
	}
	return n == 1, nil
}

// Process runs fn for eventID once for this consumer: in a new transaction
// on DB it records the id and, if it was not recorded before, runs fn with
// the transaction, then commits. It returns true when fn ran and committed,
// false with a nil error when the id had taken effect before (fn did not
// run), and fn's error (the transaction rolled back, the id not recorded,
// so a redelivery runs fn again) or a database error otherwise.
func (ib *Inbox) Process(ctx context.Context, eventID string, fn func(ctx context.Context, tx *sql.Tx) error) (applied bool, err error) {
	if fn == nil {
		return false, core.Invalid("inbox handler", "is nil")
	}
	tx, err := ib.cfg.DB.BeginTx(ctx, ib.cfg.TxOptions)
	if err != nil {
		return false, fmt.Errorf("inbox: begin: %w", err)
	}
	defer func() {
		if err != nil || !applied {
			// Rollback survives a cancelled ctx: database/sql sends it
			// on the transaction's own connection.
			_ = tx.Rollback()
		}
	}()
	first, err := ib.Record(ctx, tx, eventID)
	if err != nil || !first {
		return false, err
	}
	if err := fn(ctx, tx); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("inbox: commit %s: %w", eventID, err)
	}
	return true, nil
}

// Seen reports whether eventID has taken effect for this consumer.
func (ib *Inbox) Seen(ctx context.Context, eventID string) (bool, error) {
	var one int
	err := ib.cfg.DB.QueryRowContext(ctx, ib.seen, ib.cfg.Consumer, eventID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inbox: seen %s: %w", eventID, err)
	}
	return true, nil
}

// Purge deletes this consumer's entries received before cutoff, in
// statements of at most Config.PurgeBatch rows until one deletes fewer, and
// returns how many it deleted. An id purged and then redelivered takes
// effect again: keep entries longer than any redelivery can come.
func (ib *Inbox) Purge(ctx context.Context, cutoff time.Time) (int64, error) {
	var total int64
	for {
		var args []any
		if ib.cfg.Dialect == SQLite {
			args = []any{ib.cfg.Consumer, ib.cfg.Consumer, ib.timeArg(cutoff), ib.cfg.PurgeBatch}
		} else {
			args = []any{ib.cfg.Consumer, ib.timeArg(cutoff), ib.cfg.PurgeBatch}
		}
		res, err := ib.cfg.DB.ExecContext(ctx, ib.purge, args...)
		if err != nil {
			return total, fmt.Errorf("inbox: purge: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("inbox: purge: %w", err)
		}
		total += n
		if n < int64(ib.cfg.PurgeBatch) {
			return total, nil
		}
	}
}
