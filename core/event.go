package core

import (
	"fmt"
	"time"
)

// Status is the state of a stored event. The numeric values are stored in the
// status column and must not change.
type Status int16

const (
	StatusNew   Status = 0 // written, not yet delivered
	StatusDone  Status = 1 // delivered (terminal)
	StatusRetry Status = 2 // failed, waiting for its next attempt
	StatusDead  Status = 3 // gave up (terminal); can be replayed
	// StatusStream is an event written for position delivery (see
	// outbox.DeliveryPosition): no claim reads it; the position reader of
	// its table delivers it in position order and writes its row again
	// only when the delivery fails (RETRY or DEAD). A delivered STREAM row
	// keeps its status: what lies at or below the table's persisted
	// position is delivered.
	StatusStream Status = 5
)

// String returns the status name: NEW, DONE, RETRY, DEAD, WAITING or STREAM.
func (s Status) String() string {
	switch s {
	case StatusNew:
		return "NEW"
	case StatusDone:
		return "DONE"
	case StatusRetry:
		return "RETRY"
	case StatusDead:
		return "DEAD"
	case StatusWaiting:
		return "WAITING"
	case StatusStream:
		return "STREAM"
	}
	return fmt.Sprintf("Status(%d)", int16(s))
}

// Terminal reports whether s is DONE or DEAD. Terminal rows are never moved by
// the dispatcher; only replay (DEAD to NEW) and purge touch them.
func (s Status) Terminal() bool { return s == StatusDone || s == StatusDead }

// Event is an envelope as stored in the outbox table, with its delivery state.
// Listeners receive it; its embedded Envelope gives the id, type and payload.
type Event struct {
	Envelope
	Status      Status
	Attempts    int       // failed deliveries so far
	AvailableAt time.Time // not delivered before this time
	CreatedAt   time.Time // equals OccurredAt; orders delivery
	DoneAt      time.Time // when the row became terminal; zero otherwise
	// LastError is the last failure, truncated; it never contains the
	// payload. Marking an event DONE keeps it, so that a delivered event
	// still shows what its earlier attempts failed with.
	LastError string
	LockedBy  string    // lease owner, "" when not leased
	LockedAt  time.Time // lease start; zero when not leased
	// Seq is the event's position in its key (aggregate type and id) when
	// its aggregate type is ordered (see Ordering); 0 for unordered events.
	Seq int64
}
