package core

import "fmt"

// PanicError is a recovered panic of a listener or an interceptor hook. A
// listener that panics fails its delivery with a *PanicError, which is what
// Interceptor.After receives as the outcome, so an interceptor can tell a
// panic from an ordinary failure with errors.As. Its message, stored as the
// event's last error, holds the panic value; the stack is for logs only.
type PanicError struct {
	// Value is the value passed to panic.
	Value any
	// Stack is the stack of the panicking goroutine, as runtime/debug.Stack
	// formats it.
	Stack []byte
}

// Error returns "panic: " followed by the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Unwrap returns the panic value if it is an error, so that a panic with a
// *PermanentError still means permanent.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
