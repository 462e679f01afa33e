package sqlstore

import (
	"testing"
	"time"
)

func TestLeaseClock(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	us := time.Microsecond
	var c leaseClock
	for _, step := range []struct {
		name    string
		in, out time.Time
	}{
		{"first time as given", t0, t0},
		{"same time moves past the last", t0, t0.Add(us)},
		{"still standing", t0, t0.Add(2 * us)},
		{"sub-microsecond is truncated", t0.Add(2*us + 500), t0.Add(3 * us)},
		{"later time as given", t0.Add(time.Millisecond), t0.Add(time.Millisecond)},
		{"slightly earlier moves past the last", t0.Add(time.Millisecond - 10*us), t0.Add(time.Millisecond + us)},
		{"far earlier taken as given", t0.Add(-time.Hour), t0.Add(-time.Hour)},
		{"zone dropped", t0.In(time.FixedZone("X", 3600)).Add(time.Hour), t0.Add(time.Hour)},
	} {
		if got := c.next(step.in); !got.Equal(step.out) || got.Location() != time.UTC {
			t.Fatalf("%s: next(%v) = %v, want %v", step.name, step.in, got, step.out)
		}
	}
}
