package sqlstore

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

// ClaimStrategy is the shape of the claim statement(s).
type ClaimStrategy int

const (
	// ClaimReturning is one statement:
	// UPDATE ... WHERE event_id IN (SELECT ... LIMIT n [FOR UPDATE SKIP LOCKED]) RETURNING ...
	// (PostgreSQL, SQLite).
	ClaimReturning ClaimStrategy = iota
	// ClaimUpdateThenSelect is UPDATE ... ORDER BY ... LIMIT n setting the
	// lease, then a SELECT of the rows by lease owner and lease time (MySQL,
	// TiDB, MariaDB before 10.6).
	ClaimUpdateThenSelect
	// ClaimSelectForUpdate is, in one transaction, SELECT ... ORDER BY ...
	// LIMIT n FOR UPDATE SKIP LOCKED, then UPDATE of those ids (MySQL 8,
	// MariaDB 10.6+).
	ClaimSelectForUpdate
)

// String names the strategy.
func (c ClaimStrategy) String() string {
	switch c {
	case ClaimReturning:
		return "returning"
	case ClaimUpdateThenSelect:
		return "update-limit"
	case ClaimSelectForUpdate:
		return "skip-locked"
	}
	return "ClaimStrategy(" + strconv.Itoa(int(c)) + ")"
}

// Dialect is everything that differs between databases. The zero value of
// each optional field is the common behaviour.
type Dialect struct {
	// Name is the database name used in errors, such as "postgres".
	Name string
	// Numbered bind markers ($1, $2, ...) instead of '?'.
	NumberedParams bool
	// DDL is the schema template (see RenderDDL), embedded from the store's
	// schema.sql. Statements end with ";" at the end of a line.
	DDL string
	// Migrations are the versioned migrations of the schema, oldest first,
	// as templates like DDL (see ParseMigrations).
	Migrations []MigrationTemplate
	// UpgradeOrdering is the template of the statements that add ordered
	// delivery (the seq column, its index and the key table) to a table
	// made by DDL, embedded from the store's upgrade_ordering.sql.
	// CreateSchema runs them after DDL, so that new and upgraded tables end
	// up the same. A statement whose error IsAlreadyExists reports (a
	// column or index added by an earlier run, where the database has no
	// IF NOT EXISTS for it) is skipped.
	UpgradeOrdering string
	// UpgradePosition is the template of the statements that add position
	// delivery (the pos column, its index, the position table) to a table
	// made by DDL and UpgradeOrdering, embedded from the store's
	// upgrade_position.sql; CreateSchema runs them after UpgradeOrdering,
	// skipping what IsAlreadyExists reports.
	UpgradePosition string
	// Position is the SQL of position delivery; nil where the reader does
	// not run yet (the store's PositionLog returns nil).
	Position *PositionSQL
	// AfterSchema, when set, runs at the end of CreateSchema, after DDL and
	// UpgradeOrdering, for what a template cannot say (PostgreSQL's
	// partitioned table creates its time-bounded partitions there).
	AfterSchema func(ctx context.Context, db core.DBTX) error
	// IsAlreadyExists reports a "duplicate column" or "duplicate index"
	// error. Default: never.
	IsAlreadyExists func(error) bool
	// LockingRead is appended to a SELECT that must read the latest
	// committed row and lock it ("FOR UPDATE"); "" where the database
	// locks the whole database for a write transaction (SQLite).
	LockingRead string
	// LockingReadSkip is appended to a SELECT that locks the rows it
	// returns and passes, without waiting, those another transaction
	// holds ("FOR UPDATE SKIP LOCKED"); "" where the database has no such
	// read or needs none (SQLite, whose one writer holds the database).
	// With it, a DONE batch of ordered events first finishes the keys it
	// can lock at once (see MarkDoneOrdered).
	LockingReadSkip string
	// PrimaryKeyHint is put right after the table's name in the
	// statements of an ordered DONE batch that name rows by their primary
	// key (the locking read and the DONE update of the events, the key
	// UPDATE, the locking read of LockingReadSkip), e.g. "FORCE INDEX
	// (PRIMARY)": MariaDB plans a statement that names a third of a small
	// table's rows (64 of 200) as a scan of its whole primary key from the
	// first row, which locks, and waits for, rows outside its list.
	PrimaryKeyHint string
	// ErrorAbortsTx: a failed statement aborts the whole transaction
	// (PostgreSQL), so that the statements of one ordered write need no
	// savepoint to stay all-or-nothing.
	ErrorAbortsTx bool
	// KeepsTx reports an error after which the transaction is still open,
	// only the failed statement undone (MySQL: a server error other than a
	// deadlock). Set, an ordered write in the caller's transaction takes no
	// savepoint: after such an error it gives back the sequence numbers it
	// took (see giveBack). Nil: a savepoint, unless ErrorAbortsTx.
	KeepsTx func(error) bool
	// Keys is the shape of the key statements of ordered delivery (see
	// KeyStrategy). Default KeysReturning.
	Keys KeyStrategy
	// Quote quotes one identifier. Required.
	Quote func(ident string) string
	// Pending is the condition that selects rows waiting for delivery, written
	// so the claim index applies. Default: status NEW or RETRY.
	Pending string
	// Dead is the condition that selects DEAD rows. Default: status DEAD.
	Dead string
	// Done is the condition that selects DONE rows. Default: status DONE.
	Done string
	// Claim is the claim shape.
	Claim ClaimStrategy
	// ClaimLock is appended to the claim's inner SELECT, e.g.
	// "FOR UPDATE SKIP LOCKED".
	ClaimLock string
	// ClaimIndexHint is put right after the table name in the claim's SELECT,
	// e.g. "FORCE INDEX (...)"; rendered with RenderDDL.
	ClaimIndexHint string
	// InSubquery matches the ids a LIMITed subquery selects, for the UPDATE
	// and DELETE statements that cannot take LIMIT themselves (the claim of
	// ClaimReturning, batch replay and purge without LimitedWrites); %s
	// stands for the subquery. Default "event_id IN (%s)".
	InSubquery string
	// TerminalByCreated: no index on done_at; the purge and its counts reach
	// terminal rows through the index of the Done and Dead conditions, in
	// created_at order (MySQL's lane index). They add created_at < cutoff to
	// done_at < cutoff, which it implies for every row that became terminal
	// after it was created, so that the index bounds the scan; a row whose
	// created_at lies ahead of its done_at (an OccurredAt in the future) is
	// purged once its created_at is older than the cutoff too.
	TerminalByCreated bool
	// PadIDLists: the DONE, delete and release batches and the ordered
	// DONE path pad their id and key lists to a power of two, so that
	// batches of any length share a few statement texts, for drivers that
	// cache prepared statements by text (pgx; SQLite's Open caches them
	// too: unpadded, an ordered DONE batch spent half its CPU preparing its
	// four statements). With MySQL's interpolateParams statements travel
	// with their arguments inline.
	PadIDLists bool
	// LimitedWrites: UPDATE and DELETE accept ORDER BY ... LIMIT, and a
	// subquery on the same table with LIMIT is not allowed (MySQL).
	LimitedWrites bool
	// EncodeTime converts a UTC time to a bind argument. Default: the
	// time.Time itself.
	EncodeTime func(time.Time) any
	// MaxParams is the most bind parameters one statement may carry.
	MaxParams int
	// IsUniqueViolation reports a duplicate key error. Required.
	IsUniqueViolation func(error) bool
	// NamedLock is the SQL of the named locks the store offers as
	// core.Locker; nil when the database has none (SQLite).
	NamedLock *NamedLockSQL
	// IsRetryable reports an error after which the statement may simply be run
	// again (deadlock, lock wait timeout, serialization failure, busy).
	IsRetryable func(error) bool
}

func (d *Dialect) withDefaults() {
	if d.Pending == "" {
		d.Pending = pendingStatus
	}
	if d.Dead == "" {
		d.Dead = "status = " + stDead
	}
	if d.Done == "" {
		d.Done = "status = " + stDone
	}
	if d.InSubquery == "" {
		d.InSubquery = "event_id IN (%s)"
	}
	if d.EncodeTime == nil {
		d.EncodeTime = func(t time.Time) any { return t }
	}
	if d.MaxParams == 0 {
		d.MaxParams = 32766
	}
	if d.IsAlreadyExists == nil {
		d.IsAlreadyExists = func(error) bool { return false }
	}
	if d.IsRetryable == nil {
		d.IsRetryable = func(error) bool { return false }
	}
}

// idsIn returns the condition matching the ids sub selects.
func (d *Dialect) idsIn(sub string) string { return strings.Replace(d.InSubquery, "%s", sub, 1) }

// rebind turns '?' markers into the dialect's markers. Statements here never
// contain '?' inside literals.
func (d *Dialect) rebind(q string) string {
	if !d.NumberedParams {
		return q
	}
	var b strings.Builder
	b.Grow(len(q) + 16)
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

// SQLiteTimeFormat is the fixed-width text form of timestamps in SQLite: it
// sorts and compares correctly as text and keeps microseconds.
const SQLiteTimeFormat = "2006-01-02T15:04:05.000000Z"
