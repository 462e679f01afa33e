package core_test

import (
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

func TestExponentialBackoff(t *testing.T) {
	fixed := func(r float64) func() float64 { return func() float64 { return r } }
	cases := []struct {
		name    string
		policy  core.ExponentialBackoff
		attempt int
		want    time.Duration
	}{
		{"first, no jitter", core.ExponentialBackoff{Rand: fixed(0.5)}, 1, 200 * time.Millisecond},
		{"second doubles", core.ExponentialBackoff{Rand: fixed(0.5)}, 2, 400 * time.Millisecond},
		{"fifth", core.ExponentialBackoff{Rand: fixed(0.5)}, 5, 3200 * time.Millisecond},
		{"capped at max", core.ExponentialBackoff{Rand: fixed(0.5)}, 12, 60 * time.Second},
		{"huge attempt stays capped", core.ExponentialBackoff{Rand: fixed(0.5)}, 1000, 60 * time.Second},
		{"zero attempt is first", core.ExponentialBackoff{Rand: fixed(0.5)}, 0, 200 * time.Millisecond},
		{"lowest jitter", core.ExponentialBackoff{Rand: fixed(0)}, 1, 100 * time.Millisecond},
		{"highest jitter", core.ExponentialBackoff{Rand: fixed(0.999)}, 1, 299800 * time.Microsecond},
		{"custom base/max", core.ExponentialBackoff{Base: time.Second, Max: 5 * time.Second, Rand: fixed(0.5)}, 4, 5 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.policy.Delay(tc.attempt); got != tc.want {
				t.Errorf("Delay(%d) = %v, want %v", tc.attempt, got, tc.want)
			}
		})
	}
}

func TestExponentialBackoffJitterRange(t *testing.T) {
	var p core.ExponentialBackoff
	for range 1000 {
		d := p.Delay(3)
		if d < 400*time.Millisecond || d >= 1200*time.Millisecond {
			t.Fatalf("Delay(3) = %v outside [400ms, 1.2s)", d)
		}
	}
}
