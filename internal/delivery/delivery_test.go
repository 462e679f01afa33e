package delivery_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/delivery"
)

// step is a RetryPolicy whose delay is attempts seconds.
type step struct{}

func (step) Delay(attempts int) time.Duration { return time.Duration(attempts) * time.Second }

func TestAfterFailure(t *testing.T) {
	t.Parallel()
	plain := errors.New("boom")
	tests := []struct {
		name      string
		err       error
		attempts  int
		wantDead  bool
		wantDelay time.Duration
	}{
		{"first failure: the policy's delay", plain, 1, false, time.Second},
		{"later failure: the policy's delay", plain, 3, false, 3 * time.Second},
		{"the MaxAttempts-th failure", plain, 5, true, 0},
		{"beyond MaxAttempts", plain, 6, true, 0},
		{"permanent on the first failure", core.Permanent(plain), 1, true, 0},
		{"permanent, wrapped", fmt.Errorf("listener: %w", core.Permanent(plain)), 1, true, 0},
		{"RetryAfter", core.RetryAfter(plain, 42*time.Millisecond), 2, false, 42 * time.Millisecond},
		{"RetryAfter, negative", core.RetryAfter(plain, -time.Second), 2, false, 0},
		{"RetryAfter on the last attempt", core.RetryAfter(plain, time.Second), 5, true, 0},
		{"a panic with a permanent error", &core.PanicError{Value: core.Permanent(plain)}, 1, true, 0},
	}
	for _, tt := range tests {
		dead, delay := delivery.AfterFailure(tt.err, tt.attempts, 5, step{})
		if dead != tt.wantDead || delay != tt.wantDelay {
			t.Errorf("%s: dead=%v delay=%v, want %v %v", tt.name, dead, delay, tt.wantDead, tt.wantDelay)
		}
	}
}

func TestRecover(t *testing.T) {
	t.Parallel()
	run := func(f func() error) (err error) {
		defer delivery.Recover(&err)
		return f()
	}
	if err := run(func() error { return nil }); err != nil {
		t.Errorf("no panic: %v", err)
	}
	plain := errors.New("boom")
	if err := run(func() error { return plain }); err != plain {
		t.Errorf("returned error: %v, want it unchanged", err)
	}
	err := run(func() error { panic("oops") })
	var pe *core.PanicError
	if !errors.As(err, &pe) || err.Error() != "panic: oops" || len(pe.Stack) == 0 {
		t.Fatalf("panic(\"oops\") became %v (%T), want a *PanicError with a stack", err, err)
	}
	err = run(func() error { panic(plain) })
	if !errors.Is(err, plain) {
		t.Errorf("panic with an error: %v does not unwrap to it", err)
	}
}
