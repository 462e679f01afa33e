package core

import (
	"context"
	"database/sql"
	"errors"
)

// ErrLockLost is returned by Lock.Check when the lock's session is alive but
// no longer holds the lock.
var ErrLockLost = errors.New("outbox: lock lost")

// Conner is a pool that hands out a dedicated connection: *sql.DB and
// *sqlx.DB. A named lock lives as long as the database session that took it,
// so it needs a connection of its own, not a statement on the pool.
type Conner interface {
	Conn(ctx context.Context) (*sql.Conn, error)
}

// Locker is the optional capability of a store that can hold a named lock
// between the processes sharing its table: a session-level advisory lock on
// PostgreSQL (pg_try_advisory_lock), GET_LOCK on MySQL and MariaDB. The
// lock is scoped to the store's table: two stores on different tables never
// contend, whatever the name. Find it with StoreAs[Locker](store).
//
// The purger takes one per run so that one instance purges at a time, and
// the single-active relay holds one while it claims. A lock is exclusion for
// efficiency, not for correctness: it is held by a database session, and a
// holder whose connection is lost learns it only at its next Check, so two
// holders may briefly overlap. Correctness stays with the leases fenced by
// owner.
type Locker interface {
	// TryLock tries once, without waiting, to take the lock name of this
	// store's table on a dedicated connection of db. It returns the held
	// lock and true, or nil and false when another session holds it. An
	// error means the lock could not be tried (no connection, a failed
	// statement); no connection is kept then.
	TryLock(ctx context.Context, db Conner, name string) (Lock, bool, error)
}

// Lock is a named lock held by one database session (see Locker).
type Lock interface {
	// Check asks the database whether this session still holds the lock. It
	// returns nil when it does, ErrLockLost when the session is alive but no
	// longer holds it, and the connection's error when the session cannot
	// be reached; in every non-nil case the holder must act as if the lock
	// were gone.
	Check(ctx context.Context) error
	// Unlock releases the lock and returns its connection to the pool (or
	// closes it when the release fails, which ends the session and so the
	// lock). It is idempotent.
	Unlock(ctx context.Context) error
}
