// Package mysql is the outbox store for MySQL 8, MariaDB 10.6+ and TiDB, used
// through database/sql with github.com/go-sql-driver/mysql; importing this
// package registers that driver ("mysql").
//
// # Connection
//
// The DSN must carry parseTime=true and keep the driver's loc at UTC (its
// default): the table stores DATETIME(6) values without a zone, so every
// process sharing it must write and read them in the same one. Open enforces
// both. (Without parseTime the store still reads timestamps correctly, as
// text, as long as loc is UTC; other code on the same pool may not.)
//
// # Claim
//
// MySQL has no UPDATE ... RETURNING and no partial indexes. The table carries
// a stored generated column, lane, that is 0 for every row waiting for
// delivery (NEW and RETRY), so one index on (lane, created_at, event_id,
// available_at) lets the claim walk the pending rows in order and stop after
// LIMIT rows, however long the backlog. Two claim strategies are offered (see
// ClaimStrategy). ClaimSkipLocked, the default, claimed as many rows per
// second as ClaimUpdateLimit on MariaDB 10.11, with one and four concurrent
// claimers, but never deadlocked and needs no index on the lease columns
// (figures in docs/store-indexes.md).
//
// Deadlocks (1213) and lock wait timeouts (1205) are retried inside the store
// when it is handed a pool; inside a caller's transaction they are returned,
// because the server has already rolled that transaction back.
//
// # Position delivery
//
// outbox.DeliveryPosition runs on MariaDB 10.5 and later only: positions
// come from a SEQUENCE, and the reader tells a gap that can no longer
// commit by the start times of information_schema.innodb_trx, which needs
// the PROCESS privilege. outbox.Outbox.Start refuses it on MySQL, which has
// no sequences, and on a MariaDB server it cannot run on, naming why
// (docs/design/position.md).
//
// # TiDB
//
// Untested. TiDB parses SELECT ... FOR UPDATE SKIP LOCKED but does not
// implement the skipping as MySQL does, and it takes no lock in an autocommit
// SELECT ... FOR UPDATE; use ClaimUpdateLimit there, whose single UPDATE is
// atomic under TiDB's own conflict handling.
package mysql

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/outboxkit/outbox/core"
	dsnpkg "github.com/outboxkit/outbox/internal/dsn"
	"github.com/outboxkit/outbox/store/internal/sqlstore"
)

//go:generate go run ../internal/storegen/cmd/storegen -pkg mysql

//go:embed schema.sql
var ddl string

//go:embed upgrade_ordering.sql
var upgradeOrdering string

//go:embed upgrade_position.sql
var upgradePosition string

// ClaimStrategy selects how Claim leases rows.
type ClaimStrategy int

const (
	// ClaimSkipLocked (the default) runs, in one READ COMMITTED transaction,
	// SELECT ... ORDER BY created_at, event_id LIMIT n FOR UPDATE SKIP LOCKED
	// and an UPDATE of the selected ids. Concurrent pollers pass each other's
	// rows instead of waiting on them; InnoDB locks a row its scan reads even
	// where the row then fails the WHERE, so a claim can also pass a due row
	// the other claim does not take, which the next poll claims. Needs MySQL
	// 8.0.1+ or MariaDB 10.6+.
	ClaimSkipLocked ClaimStrategy = iota
	// ClaimUpdateLimit runs UPDATE ... ORDER BY created_at, event_id LIMIT n
	// setting the lease, then reads the rows back by lease owner and lease
	// time. It works on any MySQL-compatible server, but concurrent pollers
	// queue on each other's row locks and deadlock under contention (the
	// store retries), and the read-back needs an extra index on
	// (locked_by, locked_at), which every claim and write-back then updates.
	// CreateSchema adds that index only for this strategy.
	ClaimUpdateLimit
)

// String names the strategy.
func (c ClaimStrategy) String() string {
	switch c {
	case ClaimSkipLocked:
		return "skip-locked"
	case ClaimUpdateLimit:
		return "update-limit"
	}
	return fmt.Sprintf("ClaimStrategy(%d)", int(c))
}

// Config configures a Store.
type Config struct {
	// Table is the outbox table name. Default "outbox_event". It must match
	// ^[A-Za-z_][A-Za-z0-9_]{0,62}$, optionally prefixed by a database name
	// of the same form and a dot.
	Table string
	// Ordered names the aggregate types whose events are delivered in order
	// per key (aggregate type and aggregate id), each with its DEAD policy
	// (see core.Ordering). Every process sharing the table must use the
	// same. Default none: every event is unordered.
	Ordered core.Ordering
	// Claim is the claim strategy. Default ClaimSkipLocked.
	Claim ClaimStrategy
}

// Store is the MySQL/MariaDB outbox store. It implements core.Store and is
// safe for concurrent use.
//
// Its methods are generated (store_gen.go), but for CreateSchema: each one
// runs the shared SQL of this module's stores in this dialect.
type Store struct {
	positionProvider // position.Source: the store side of position delivery, for package outbox
	shared           *sqlstore.Store
	claim            ClaimStrategy
	table            sqlstore.TableName
}

// New validates cfg and returns a Store. A bad table name or an unknown claim
// strategy returns an error matching core.ErrInvalid. New does not touch the
// database.
func New(cfg Config) (*Store, error) {
	table, err := sqlstore.ParseTableName(cfg.Table, true)
	if err != nil {
		return nil, err
	}
	d, err := dialect(cfg.Claim)
	if err != nil {
		return nil, err
	}
	shared, err := sqlstore.New(d, table).WithOrdering(cfg.Ordered)
	if err != nil {
		return nil, err
	}
	s := &Store{shared: shared, claim: cfg.Claim, table: table}
	s.positionProvider = newPositionProvider(s)
	return s, nil
}

// The read-back index of ClaimUpdateLimit: a line of schema.sql's CREATE
// TABLE for that strategy (at leaseIndexMarker), and what CreateSchema adds
// to a table created without it.
const (
	leaseIndexMarker  = "{{lease_index}}"
	leaseIndexSuffix  = "lease"
	leaseIndexColumns = "(locked_by, locked_at)"
	leaseIndexDDL     = ",\n    KEY {{index:" + leaseIndexSuffix + "}} " + leaseIndexColumns
)

// dialect returns the MySQL dialect of the shared SQL store for the given
// claim strategy; an unknown strategy returns an error matching
// core.ErrInvalid.
func dialect(claim ClaimStrategy) (sqlstore.Dialect, error) {
	d := sqlstore.Dialect{
		Name:  "mysql",
		Quote: quote,
		// One equality on lane keeps the index in (created_at, event_id)
		// order; see schema.sql. A row's lane is its status, but NEW and
		// RETRY share NEW's.
		Pending: "lane = " + sqlstore.StatusSQL(core.StatusNew),
		Dead:    "lane = " + sqlstore.StatusSQL(core.StatusDead),
		Done:    "lane = " + sqlstore.StatusSQL(core.StatusDone),
		// The lane index serves the purge too; see schema.sql.
		TerminalByCreated: true,
		// The planner could prefer a table scan and a sort when most of the
		// table is pending; the claim must never sort the backlog.
		ClaimIndexHint:  "FORCE INDEX ({{index:lane}})",
		LimitedWrites:   true,
		MaxParams:       65535,
		UpgradeOrdering: upgradeOrdering,
		UpgradePosition: upgradePosition,
		Position:        positionSQL,
		Keys:            sqlstore.KeysLimited,
		LockingRead:     "FOR UPDATE",
		// An ordered DONE batch names up to 512 events and 64 keys:
		// without the hint, MariaDB scans a small table's whole primary
		// key from its first row, waiting for rows outside the batch.
		PrimaryKeyHint:    "FORCE INDEX (PRIMARY)",
		IsAlreadyExists:   isAlreadyExists,
		IsUniqueViolation: isUniqueViolation,
		IsRetryable:       isRetryable,
		KeepsTx:           keepsTx,
		NamedLock:         namedLock,
	}
	switch claim {
	case ClaimSkipLocked:
		d.Claim = sqlstore.ClaimSelectForUpdate
		d.ClaimLock = "FOR UPDATE SKIP LOCKED"
		d.LockingReadSkip = "FOR UPDATE SKIP LOCKED"
		d.DDL = strings.Replace(ddl, leaseIndexMarker, "", 1)
		d.Migrations = withLeaseIndex(migrationTemplates, "")
	case ClaimUpdateLimit:
		d.Claim = sqlstore.ClaimUpdateThenSelect
		d.DDL = strings.Replace(ddl, leaseIndexMarker, leaseIndexDDL, 1)
		d.Migrations = withLeaseIndex(migrationTemplates, leaseIndexDDL)
	default:
		return sqlstore.Dialect{}, core.Invalid("mysql claim strategy", "%d is not a known strategy", int(claim))
	}
	return d, nil
}

// withLeaseIndex returns the migration templates with the lease index
// marker of 0001 replaced by index: a table migrated for ClaimUpdateLimit
// has the index CreateSchema gives it.
func withLeaseIndex(ts []sqlstore.MigrationTemplate, index string) []sqlstore.MigrationTemplate {
	out := make([]sqlstore.MigrationTemplate, len(ts))
	for i, t := range ts {
		t.Up = strings.Replace(t.Up, leaseIndexMarker, index, 1)
		out[i] = t
	}
	return out
}

// namedLock: GET_LOCK, which is per server, not per database, so the name
// starts with the session's database; it is hashed because lock names are
// limited to 64 characters. The lock belongs to the session: it is released
// when the connection ends.
var namedLock = &sqlstore.NamedLockSQL{
	TryLock: "SELECT GET_LOCK(" + lockName + ", 0)",
	Held:    "SELECT COALESCE(IS_USED_LOCK(" + lockName + ") = CONNECTION_ID(), 0)",
	Unlock:  "SELECT COALESCE(RELEASE_LOCK(" + lockName + "), 0)",
}

const lockName = "CONCAT('outbox.', SHA1(CONCAT(COALESCE(DATABASE(), ''), '.', ?)))"

// ClaimStrategy returns the store's claim strategy.
func (s *Store) ClaimStrategy() ClaimStrategy { return s.claim }

// CreateSchema creates the table and its indexes if they do not exist. With
// ClaimUpdateLimit it also adds the lease read-back index to a table created
// earlier without it (MySQL has no CREATE INDEX IF NOT EXISTS).
func (s *Store) CreateSchema(ctx context.Context, db core.DBTX) error {
	if err := s.shared.CreateSchema(ctx, db); err != nil {
		return err
	}
	if s.claim != ClaimUpdateLimit {
		return nil
	}
	index := s.table.IndexName(leaseIndexSuffix)
	var n int
	err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.statistics "+
		"WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? AND index_name = ?",
		nullIfEmpty(s.table.Schema), s.table.Name, index).Scan(&n)
	if err != nil {
		return fmt.Errorf("create schema: look up index %s: %w", index, err)
	}
	if n > 0 {
		return nil
	}
	q := "CREATE INDEX " + quote(index) + " ON " + s.table.Quoted(quote) + " " + leaseIndexColumns
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("create schema: %w", err)
	}
	return nil
}

// quote quotes an identifier; ParseTableName admits no backquote in one.
func quote(id string) string { return "`" + id + "`" }

func nullIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// MySQL server error numbers the store translates.
const (
	errDupFieldName      = 1060 // ER_DUP_FIELDNAME
	errDupKeyName        = 1061 // ER_DUP_KEYNAME
	errDupEntry          = 1062 // ER_DUP_ENTRY
	errLockWaitTimeout   = 1205 // ER_LOCK_WAIT_TIMEOUT
	errLockDeadlock      = 1213 // ER_LOCK_DEADLOCK
	errTiDBWriteConflict = 9007 // TiDB: write conflict, optimistic transactions
)

func errorNumber(err error) uint16 {
	var e *mysqldrv.MySQLError
	if errors.As(err, &e) {
		return e.Number
	}
	return 0
}

func isUniqueViolation(err error) bool { return errorNumber(err) == errDupEntry }

// isAlreadyExists: a column or index that an earlier CreateSchema added.
func isAlreadyExists(err error) bool {
	switch errorNumber(err) {
	case errDupFieldName, errDupKeyName:
		return true
	}
	return false
}

// isRetryable: after a deadlock or a lock wait timeout in autocommit mode, or
// in a transaction the store began itself, running the statement again is
// safe.
// keepsTx: a server error rolls back the failed statement only, but for a
// deadlock (and TiDB's write conflict), which rolls back the transaction;
// an error that is not the server's (a broken connection, a cancelled
// context, which closes it) leaves no transaction.
func keepsTx(err error) bool {
	var e *mysqldrv.MySQLError
	if !errors.As(err, &e) {
		return false
	}
	return e.Number != errLockDeadlock && e.Number != errTiDBWriteConflict
}

func isRetryable(err error) bool {
	switch errorNumber(err) {
	case errLockDeadlock, errLockWaitTimeout, errTiDBWriteConflict:
		return true
	}
	return false
}

// Open opens a database/sql pool on dsn with the go-sql-driver/mysql driver.
// dsn is the driver's form, "user:pass@tcp(127.0.0.1:3306)/db?params", alone
// or behind mysql:// ("mysql://user:pass@tcp(127.0.0.1:3306)/db", the form
// outboxctl shows). Open sets parseTime=true and refuses a DSN that sets
// parseTime=false or a loc other than UTC (see the package documentation).
//
// Open checks what it can without connecting: a DSN of another database (a
// postgres:// URL, a SQLite path), an address without its network
// (user@host:3306/db, which the driver would read as a network named
// "host:3306"), and a DSN the driver cannot read are refused with an error
// that matches core.ErrInvalid, shows the form to write instead and never
// shows the password.
//
// Unless the DSN sets interpolateParams or charset itself, Open also sets
// interpolateParams=true: the driver then sends each statement with its
// arguments as one query, one round trip, instead of preparing, executing and
// closing it (three), which is most of the client's cost per statement. The
// default connection character set, utf8mb4, is safe for that; the driver
// refuses it with the multibyte sets that are not.
//
// Open does not connect; the first query (or db.PingContext) does. It does
// not create the outbox table; call Store.CreateSchema for that.
func Open(dsn string) (*sql.DB, error) {
	conn, err := dsnpkg.For(dsn, dsnpkg.MySQL)
	if err != nil {
		return nil, core.Invalid("mysql dsn", "%v", err)
	}
	cfg, err := mysqldrv.ParseDSN(conn)
	if err != nil {
		return nil, core.Invalid("mysql dsn", "%q: %v", dsnpkg.Redact(dsn), err)
	}
	params := dsnParams(conn)
	if v := params.Get("parseTime"); params.Has("parseTime") && !cfg.ParseTime {
		return nil, core.Invalid("mysql dsn", "parseTime=%s: the outbox reads its DATETIME columns as time.Time; "+
			"drop parseTime (Open sets it) or set parseTime=true", v)
	}
	if cfg.Loc != nil && cfg.Loc != time.UTC {
		return nil, core.Invalid("mysql dsn", "loc=%s: the outbox stores UTC timestamps; drop loc or set loc=UTC", cfg.Loc)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	if !params.Has("interpolateParams") && !params.Has("charset") {
		cfg.InterpolateParams = true
	}
	connector, err := mysqldrv.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("open mysql: %w", err)
	}
	return sql.OpenDB(connector), nil
}

// dsnParams returns the parameters of a DSN that ParseDSN accepted: what
// follows the first '?' after its last '/'.
func dsnParams(dsn string) url.Values {
	rest := dsn[strings.LastIndexByte(dsn, '/')+1:]
	i := strings.IndexByte(rest, '?')
	if i < 0 {
		return nil
	}
	params, _ := url.ParseQuery(rest[i+1:]) // ParseDSN has read them already
	return params
}

// StrategyFor returns the claim strategy for a server whose SELECT VERSION()
// is version: ClaimSkipLocked on MySQL 8.0.1+ and MariaDB 10.6+, which
// implement SKIP LOCKED, and ClaimUpdateLimit on TiDB (see the package
// documentation) and on older servers.
func StrategyFor(version string) ClaimStrategy {
	if strings.Contains(version, "TiDB") {
		return ClaimUpdateLimit
	}
	var major, minor, patch int
	// "8.0.36", "5.7.44-log", "10.11.19-MariaDB-0+deb12u1".
	if _, err := fmt.Sscanf(version, "%d.%d.%d", &major, &minor, &patch); err != nil {
		return ClaimUpdateLimit
	}
	v := major*10000 + minor*100 + patch
	if strings.Contains(version, "MariaDB") {
		if v >= 100600 {
			return ClaimSkipLocked
		}
		return ClaimUpdateLimit
	}
	if v >= 80001 {
		return ClaimSkipLocked
	}
	return ClaimUpdateLimit
}
