package core

import (
	"math/rand/v2"
	"time"
)

// RetryPolicy says how long to wait before the next attempt after the given
// number of failed attempts (1 after the first failure).
type RetryPolicy interface {
	Delay(failedAttempts int) time.Duration
}

// Defaults of ExponentialBackoff.
const (
	DefaultBackoffBase = 200 * time.Millisecond
	DefaultBackoffMax  = 60 * time.Second
)

// ExponentialBackoff is the default RetryPolicy:
// min(Max, Base * 2^(failedAttempts-1)) multiplied by a jitter factor drawn
// uniformly from [0.5, 1.5).
type ExponentialBackoff struct {
	Base time.Duration // default 200ms
	Max  time.Duration // default 60s
	// Rand returns a float in [0, 1) and must be safe for concurrent use.
	// Default: math/rand/v2. Inject a fixed source for deterministic tests.
	Rand func() float64
}

// Delay implements RetryPolicy.
func (b ExponentialBackoff) Delay(failedAttempts int) time.Duration {
	base, maxDelay := b.Base, b.Max
	if base <= 0 {
		base = DefaultBackoffBase
	}
	if maxDelay <= 0 {
		maxDelay = DefaultBackoffMax
	}
	if failedAttempts < 1 {
		failedAttempts = 1
	}
	d := maxDelay
	if shift := failedAttempts - 1; shift < 62 && base <= maxDelay>>shift {
		d = base << shift
	}
	r := rand.Float64
	if b.Rand != nil {
		r = b.Rand
	}
	return time.Duration(float64(d) * (0.5 + r()))
}
