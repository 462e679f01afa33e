package core

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Match them with errors.Is; the errors the library returns
// wrap them with context.
var (
	// ErrInvalid marks bad input: an envelope, a table name, a configuration.
	// Every *ValidationError matches it.
	ErrInvalid = errors.New("outbox: invalid input")

	// ErrNoTransaction is returned by Writer.Write when the context carries no
	// transaction, and by Writer.WriteTx when given none (nil, or a pool).
	// Events must be written inside the business transaction; the error's
	// text names the ways to run in one.
	ErrNoTransaction = errors.New("outbox: no transaction")

	// ErrNotFound is returned by Store.Get when no row has the event id.
	// The stores of this module also match sql.ErrNoRows, which Get returned
	// before ErrNotFound existed.
	ErrNotFound = errors.New("outbox: event not found")

	// ErrDuplicateEvent is returned when an event_id already exists in the table.
	ErrDuplicateEvent = errors.New("outbox: duplicate event id")

	// ErrDuplicateListener is returned by Registry.Register when the
	// (aggregate type, event type) pair already has a listener.
	ErrDuplicateListener = errors.New("outbox: listener already registered")

	// ErrUnroutable means no listener is registered for an event's
	// (aggregate type, event type). Such an event goes DEAD without retry.
	ErrUnroutable = errors.New("outbox: no listener for event")

	// ErrClosed is returned by components used after Close.
	ErrClosed = errors.New("outbox: closed")

	// ErrAlreadyStarted is returned when a background component is started twice.
	ErrAlreadyStarted = errors.New("outbox: already started")
)

// ValidationError describes one piece of bad input. It matches ErrInvalid.
type ValidationError struct {
	Field  string // what was wrong, e.g. "event type" or "table name"
	Reason string // why, e.g. "is empty"
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("outbox: invalid %s: %s", e.Field, e.Reason)
}

// Is reports whether target is ErrInvalid.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns a *ValidationError for field whose Reason is format
// applied to args. It is the one way the library builds validation errors,
// so that every one of them reads "outbox: invalid <field>: <reason>" and
// matches ErrInvalid.
func Invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// RetryError is returned by a listener to ask for a retry after a given delay
// instead of the retry policy's. Build it with RetryAfter.
type RetryError struct {
	Err   error
	Delay time.Duration
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("retry after %s: %v", e.Delay, e.Err)
}

func (e *RetryError) Unwrap() error { return e.Err }

// RetryAfter wraps err so that the dispatcher schedules the next attempt after
// delay. The attempt still counts towards the maximum.
func RetryAfter(err error, delay time.Duration) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &RetryError{Err: err, Delay: delay}
}

// PermanentError is returned by a listener for a failure that no retry can fix.
// The dispatcher marks the event DEAD at once. Build it with Permanent.
type PermanentError struct {
	Err error
}

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the dispatcher marks the event DEAD without retry.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &PermanentError{Err: err}
}
