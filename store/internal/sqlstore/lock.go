package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/outboxkit/outbox/core"
)

// NamedLockSQL is the SQL of a dialect's named locks (core.Locker). Each
// statement takes the lock key (the table name, a colon and the lock's name)
// for every '?' it holds and returns one boolean (or 0/1) column.
type NamedLockSQL struct {
	// TryLock takes the lock without waiting: true when taken, false when
	// another session holds it.
	TryLock string
	// Held is true while this session holds the lock.
	Held string
	// Unlock releases the lock: true when this session held it.
	Unlock string
}

// unlockTimeout bounds the release of a lock, which runs even when the
// caller's context is done: a lock left held would stop every other
// instance until the session ends.
const unlockTimeout = 5 * time.Second

// namedLockStmts is NamedLockSQL in the dialect's bind markers, with the
// number of markers of each statement.
type namedLockStmts struct {
	try, held, unlock    string
	nTry, nHeld, nUnlock int
}

func (d *Dialect) namedLockStmts() *namedLockStmts {
	if d.NamedLock == nil {
		return nil
	}
	l := d.NamedLock
	return &namedLockStmts{
		try: d.rebind(l.TryLock), held: d.rebind(l.Held), unlock: d.rebind(l.Unlock),
		nTry: strings.Count(l.TryLock, "?"), nHeld: strings.Count(l.Held, "?"), nUnlock: strings.Count(l.Unlock, "?"),
	}
}

// keyArgs returns key n times, one per bind marker.
func keyArgs(key string, n int) []any {
	args := make([]any, n)
	for i := range args {
		args[i] = key
	}
	return args
}

// TryLock tries once to take the lock name of this store's table on a
// dedicated connection of db (see core.Locker). The lock's key is the table
// name as the store was configured with it and name, so processes that
// share a table must name it alike (all schema-qualified, or none). It is an
// error on a dialect without named locks.
func (s *Store) TryLock(ctx context.Context, db core.Conner, name string) (core.Lock, bool, error) {
	stmts := s.locks
	if stmts == nil {
		return nil, false, fmt.Errorf("try lock: %s has no named locks", s.d.Name)
	}
	key := s.table.String() + ":" + name
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("try lock %s: %w", key, err)
	}
	var taken sql.NullBool
	if err := conn.QueryRowContext(ctx, stmts.try, keyArgs(key, stmts.nTry)...).Scan(&taken); err != nil {
		// The statement may have taken the lock before it failed (a
		// cancelled context cuts the wait for its answer, not the
		// statement): end the session, which releases whatever it holds.
		discard(conn)
		return nil, false, fmt.Errorf("try lock %s: %w", key, err)
	}
	if !taken.Bool {
		_ = conn.Close()
		return nil, false, nil
	}
	return &namedLock{stmts: stmts, key: key, conn: conn}, true, nil
}

// discard closes conn's session instead of returning it to the pool.
func discard(conn *sql.Conn) {
	// Raw closes the driver connection when its function returns
	// driver.ErrBadConn.
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

var _ core.Lock = (*namedLock)(nil)

// namedLock is a held lock: the session of conn holds it.
type namedLock struct {
	stmts *namedLockStmts
	key   string

	mu   sync.Mutex // serialises Check and Unlock on conn
	conn *sql.Conn  // nil after Unlock
}

// Check asks the lock's session whether it still holds the lock (see
// core.Lock). It runs on the lock's connection, so a lost session fails it.
func (l *namedLock) Check(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn == nil {
		return core.ErrLockLost
	}
	var held sql.NullBool
	if err := l.conn.QueryRowContext(ctx, l.stmts.held, keyArgs(l.key, l.stmts.nHeld)...).Scan(&held); err != nil {
		return fmt.Errorf("check lock %s: %w", l.key, err)
	}
	if !held.Bool {
		return fmt.Errorf("check lock %s: %w", l.key, core.ErrLockLost)
	}
	return nil
}

// Unlock releases the lock and returns the connection to the pool, or
// closes the session when the release fails (see core.Lock).
func (l *namedLock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	conn := l.conn
	if conn == nil {
		return nil
	}
	l.conn = nil
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	var released sql.NullBool
	if err := conn.QueryRowContext(uctx, l.stmts.unlock, keyArgs(l.key, l.stmts.nUnlock)...).Scan(&released); err != nil {
		// Whether the lock is still held is unknown: ending the session
		// releases it for sure.
		discard(conn)
		return fmt.Errorf("unlock %s: %w", l.key, err)
	}
	return conn.Close()
}
