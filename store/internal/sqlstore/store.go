package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

// Store implements core.Store over database/sql for one table and dialect.
type Store struct {
	d     Dialect
	table TableName
	qt    string // quoted table

	insertPrefix string
	// insertOne holds the statements of a single unordered event, indexed
	// by the oneRow bits of the columns it binds; the others are literals
	// (see insertOneRow).
	insertOne [oneRowShapes]string
	markDone  string
	markRetry string
	markDead  string
	get       string
	// claims[0] walks the pending rows from the oldest one, claims[1] from
	// ClaimParams.From (one more bind argument, first among the candidate
	// arguments).
	claims        [2]claimStmts
	claimReadBack string
	claimRows     claimFunc  // the strategy of Dialect.Claim (claim.go)
	leases        leaseClock // ClaimUpdateThenSelect

	// Ordered delivery (order.go).
	ordering    core.Ordering // nil: nothing ordered
	keys        keyStrategy   // the strategy of Dialect.Keys
	keyGiveBack string        // KeepsTx: see giveBack
	keyAdvance  string        // SkipDead
	promoteFree string        // SkipDead

	locks *namedLockStmts // nil without NamedLock
}

// New returns a Store for table in dialect d, with the claim and key
// strategies d names; it panics on a strategy it does not know (dialects
// are this module's own).
func New(d Dialect, table TableName) *Store {
	d.withDefaults()
	s := &Store{d: d, table: table, qt: table.Quoted(d.Quote), locks: d.namedLockStmts()}
	s.insertPrefix = "INSERT INTO " + s.qt + " (event_id, event_type, aggregate_type, aggregate_id, tenant_id, " +
		"payload, headers, status, attempts, available_at, created_at, locked_by, locked_at, seq) VALUES "
	for shape := range s.insertOne {
		s.insertOne[shape] = d.rebind(s.insertPrefix + oneRowValues(shape))
	}
	fence := " WHERE event_id = ? AND locked_by = ? AND " + pendingStatus
	s.markDone = d.rebind("UPDATE " + s.qt + " SET status = " + stDone + ", done_at = ?, locked_by = NULL, locked_at = NULL" + fence)
	s.markRetry = d.rebind("UPDATE " + s.qt + " SET status = " + stRetry + ", attempts = attempts + 1, available_at = ?, " +
		"last_error = ?, locked_by = NULL, locked_at = NULL" + fence)
	s.markDead = d.rebind("UPDATE " + s.qt + " SET status = " + stDead + ", attempts = attempts + 1, done_at = ?, " +
		"last_error = ?, locked_by = NULL, locked_at = NULL" + fence)
	s.get = d.rebind("SELECT " + columns + " FROM " + s.qt + " WHERE event_id = ?")
	s.claimStmts()
	s.orderedStmts()
	return s
}

// Table returns the table this store works on, schema-qualified when it has
// a schema.
func (s *Store) Table() string { return s.table.String() }

func (s *Store) ts(t time.Time) any { return s.d.EncodeTime(t.UTC().Truncate(time.Microsecond)) }

// wrap translates driver errors at the store boundary.
func (s *Store) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if s.d.IsUniqueViolation(err) {
		return fmt.Errorf("%s: %w: %w", op, core.ErrDuplicateEvent, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// retry runs fn again after errors the dialect calls retryable (deadlocks,
// busy), but only when db is a pool: inside the caller's transaction a
// deadlock has already rolled everything back.
func (s *Store) retry(ctx context.Context, db core.DBTX, fn func() error) error {
	_, isPool := db.(core.TxBeginner)
	const attempts = 5
	backoff := 2 * time.Millisecond
	for i := 1; ; i++ {
		err := fn()
		if err == nil || !isPool || i == attempts || !s.d.IsRetryable(err) {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff *= 4
	}
}

func (s *Store) exec(ctx context.Context, db core.DBTX, q string, args ...any) (int64, error) {
	var n int64
	err := s.retry(ctx, db, func() error {
		res, err := db.ExecContext(ctx, s.d.rebind(q), args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// inTx runs fn in a READ COMMITTED transaction begun on db, or directly on
// db when db is already a transaction.
func inTx(ctx context.Context, db core.DBTX, fn func(tx core.DBTX) error) error {
	return inTxOpts(ctx, db, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, fn)
}

// InTx runs fn in a transaction with opts begun on db, committed when fn
// succeeds, or directly on db when db is already a transaction.
func InTx(ctx context.Context, db core.DBTX, opts *sql.TxOptions, fn func(tx core.DBTX) error) error {
	return inTxOpts(ctx, db, opts, fn)
}

func inTxOpts(ctx context.Context, db core.DBTX, opts *sql.TxOptions, fn func(tx core.DBTX) error) (err error) {
	b, ok := db.(core.TxBeginner)
	if !ok {
		return fn(db)
	}
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if err = fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// inList appends "?, ?, ..." for ids to prefix and returns the rebound query
// (without the closing parenthesis) and the arguments.
func (s *Store) inList(prefix string, ids []string, head ...any) (string, []any) {
	var sb strings.Builder
	sb.WriteString(prefix)
	args := append(make([]any, 0, len(head)+len(ids)), head...)
	for i, id := range ids {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteByte('?')
		args = append(args, id)
	}
	return sb.String(), args
}

var (
	_ core.Store       = (*Store)(nil)
	_ core.BatchMarker = (*Store)(nil)
)

// notFound is the error of Get for a missing row. It matches
// core.ErrNotFound and, for callers written before that existed,
// sql.ErrNoRows.
type notFound struct{}

func (notFound) Error() string   { return core.ErrNotFound.Error() }
func (notFound) Unwrap() []error { return []error{core.ErrNotFound, sql.ErrNoRows} }
