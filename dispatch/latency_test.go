package dispatch

import (
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
)

func TestDeliveryLatency(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 10, 0, time.UTC)
	at := func(sec int) time.Time { return now.Add(time.Duration(sec) * time.Second) }
	for _, tc := range []struct {
		name      string
		ev        core.Event
		hot       bool
		wantQueue string
		want      time.Duration
	}{
		{"hot: from the after-commit hand-off", core.Event{CreatedAt: at(-60), LockedAt: at(-1)}, true, "hot", time.Second},
		{"cold first attempt: from created_at", core.Event{CreatedAt: at(-3), AvailableAt: at(-3), LockedAt: at(0)}, false, "cold", 3 * time.Second},
		{"cold retry: from when it fell due", core.Event{CreatedAt: at(-60), AvailableAt: at(-2)}, false, "cold", 2 * time.Second},
		{"a writer clock ahead of ours counts as 0", core.Event{CreatedAt: at(5), AvailableAt: at(5)}, false, "cold", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, d := deliveryLatency(tc.ev, tc.hot, now)
			if q != tc.wantQueue || d != tc.want {
				t.Errorf("deliveryLatency = %s %v, want %s %v", q, d, tc.wantQueue, tc.want)
			}
		})
	}
}
