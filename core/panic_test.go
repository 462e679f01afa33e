package core_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/outboxkit/outbox/core"
)

func TestPanicError(t *testing.T) {
	t.Parallel()
	var err error = fmt.Errorf("listener: %w", &core.PanicError{Value: "oops", Stack: []byte("stack")})
	var pe *core.PanicError
	if !errors.As(err, &pe) || pe.Value != "oops" || string(pe.Stack) != "stack" {
		t.Fatalf("errors.As(%v) = %v, want the *PanicError", err, pe)
	}
	if got := pe.Error(); got != "panic: oops" {
		t.Errorf("Error() = %q, want %q", got, "panic: oops")
	}
	if pe.Unwrap() != nil {
		t.Errorf("Unwrap of a non-error value = %v, want nil", pe.Unwrap())
	}
	perm := core.Permanent(errors.New("bad"))
	err = &core.PanicError{Value: perm}
	var pme *core.PermanentError
	if !errors.Is(err, perm) || !errors.As(err, &pme) {
		t.Errorf("a panic with a permanent error does not unwrap to it: %v", err)
	}
}
