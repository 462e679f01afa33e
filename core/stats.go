package core

import (
	"context"
	"time"
)

// Stats is a snapshot of an outbox table by delivery state.
type Stats struct {
	New    int64 // NEW rows (leased or not)
	Retry  int64 // RETRY rows (waiting or due)
	Leased int64 // NEW or RETRY rows currently leased: queued or in flight
	Dead   int64
	Done   int64
	// Waiting counts ordered events waiting for an earlier event of their
	// key; BlockedKeys counts keys held up by a DEAD head (see Ordering).
	Waiting     int64
	BlockedKeys int64
	// OldestPending is the created_at of the oldest NEW or RETRY row; zero
	// when nothing is pending.
	OldestPending time.Time
	// Position delivery (outbox.DeliveryPosition), zero without it: Stream
	// counts the STREAM rows above the table's persisted floor (not yet
	// known to be delivered), PositionLag is the largest position minus the
	// floor, and OldestStream the created_at of the oldest of those rows.
	Stream       int64
	PositionLag  int64
	OldestStream time.Time
}

// Inspector is implemented by stores that can describe their table for
// operations tooling: the Prometheus sampler and outboxctl. All SQL stores of
// this module implement it; find it with StoreAs.
type Inspector interface {
	// Stats counts the rows by state and finds the oldest pending one.
	Stats(ctx context.Context, db DBTX) (Stats, error)
	// CountPurgeable counts the DONE and DEAD rows a Purge with p would
	// delete, ignoring p.Limit.
	CountPurgeable(ctx context.Context, db DBTX, p PurgeParams) (done, dead int64, err error)
	// CountByType counts the NEW, RETRY and DEAD rows of each (aggregate
	// type, event type) that has any, ordered by aggregate type and then
	// event type.
	CountByType(ctx context.Context, db DBTX) ([]TypeCount, error)
}

// TypeCount is the backlog of one (aggregate type, event type): its rows
// waiting for delivery and its DEAD rows. Delivered rows are not counted by
// type: that would read every DONE row of the table.
type TypeCount struct {
	AggregateType string
	EventType     string
	New           int64 // NEW rows (leased or not)
	Retry         int64 // RETRY rows (waiting or due)
	Dead          int64
}
