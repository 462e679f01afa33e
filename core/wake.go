package core

import "context"

// InsertNotifier is an optional capability of a Store whose database can
// signal other sessions when a transaction commits (PostgreSQL's NOTIFY). A
// Writer finds it with StoreAs and, when it writes events that this
// process's hot path will not deliver, calls NotifyInsert in the same
// transaction (once per transaction when it is a core.Tx such as txctx's,
// once per write on a plain *sql.Tx, whose end the Writer cannot see): the
// signal then reaches the pollers that watch the table (see WakeSource)
// when, and only if, the transaction commits.
type InsertNotifier interface {
	// NotifyInsert queues, in tx, a signal that new events are in the
	// table. Several calls in one transaction are delivered as one. An error
	// means the statement failed; on PostgreSQL the transaction is then
	// aborted, so the Writer returns the error as it does a failed insert.
	NotifyInsert(ctx context.Context, tx DBTX) error
}

// WakeSource is an optional capability of a Store that can tell a poller that
// events were committed to its table by any session (PostgreSQL's LISTEN).
// A poller finds it with StoreAs and runs Watch on a goroutine it owns, so
// that events written by other instances, or without a hot path, are claimed
// at once instead of at the next poll; polling stays the safety net.
type WakeSource interface {
	// Watch takes a dedicated connection from db (a pool: *sql.DB or
	// *sqlx.DB), subscribes to the table's signals, calls wake once
	// subscribed (signals sent before then were missed) and then once per
	// signal received, until ctx is done or the connection fails. It never
	// returns nil: it returns ctx's error once ctx is done, and the
	// connection's error when it failed, after which the caller calls it
	// again (with a back-off). wake must not block.
	Watch(ctx context.Context, db DBTX, wake func()) error
}
