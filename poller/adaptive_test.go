package poller_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/outboxkit/outbox/poller"
)

// TestAdaptivePoll: after a poll that handed events over, polls run every
// BusyInterval for BusyFor, then return to Interval; an outbox that stays
// idle is polled once per Interval.
func TestAdaptivePoll(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newFakeStore()
		st.add(t, "ev", 1, time.Now().Add(-time.Minute))
		h := &fakeHandler{capacity: 100}
		p := newPoller(t, st, h, func(c *poller.Config) {
			c.Interval = time.Second
			c.BusyInterval = 100 * time.Millisecond
			c.BusyFor = 500 * time.Millisecond
		})
		if err := p.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n, got := st.claimCount(), h.received(); n != 1 || got != 1 {
			t.Fatalf("claims, received at start = %d, %d; want 1, 1", n, got)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if n := st.claimCount(); n != 2 {
			t.Fatalf("claims after one busy interval = %d, want 2", n)
		}
		// Busy until 500 ms: polls at 100, 200, 300, 400 and 500 ms.
		time.Sleep(450 * time.Millisecond)
		synctest.Wait()
		if n := st.claimCount(); n != 6 {
			t.Fatalf("claims at 550 ms = %d, want 6", n)
		}
		// Idle again: the next poll is an interval after the last.
		time.Sleep(940 * time.Millisecond)
		synctest.Wait()
		if n := st.claimCount(); n != 6 {
			t.Fatalf("claims at 1490 ms = %d, want 6 (back to the interval)", n)
		}
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		if n := st.claimCount(); n != 7 {
			t.Fatalf("claims at 1510 ms = %d, want 7", n)
		}
		_ = p.Close(context.Background())
	})
}

// TestWakeBurstCoalesces: Wake calls made at different times while a poll
// runs (a watch receiving one notification per commit of another instance)
// cost one more poll, not one poll each.
func TestWakeBurstCoalesces(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		st := newFakeStore()
		p := newPoller(t, st, &fakeHandler{capacity: 100}, func(c *poller.Config) { c.Interval = time.Hour })
		if err := p.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		release := st.holdClaims()
		p.Wake()
		synctest.Wait() // the poll is waiting in Claim
		for range 50 {
			time.Sleep(time.Millisecond)
			p.Wake()
		}
		release()
		synctest.Wait()
		if n := st.claimCount(); n != 3 {
			t.Fatalf("claims = %d, want 3: the start, the first Wake, one for the 50 during it", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if n := st.claimCount(); n != 3 {
			t.Fatalf("claims a second later = %d, want 3", n)
		}
		_ = p.Close(context.Background())
	})
}

// TestBacklogWaitsForRoom: while a backlog drains, a claim waits for room
// for a whole claim (or half the handler's queue) instead of claiming the
// few slots a slow handler has freed; without a backlog it takes any room.
func TestBacklogWaitsForRoom(t *testing.T) {
	t.Parallel()
	st := newFakeStore()
	st.add(t, "ev", 1000, time.Now().Add(-time.Minute))
	h := &fakeHandler{capacity: 1000}
	p := newPoller(t, st, h, func(c *poller.Config) { c.BatchSize, c.MaxBatchSize = 100, 400 })
	ctx := context.Background()
	if n, err := p.PollOnce(ctx); err != nil || n != 100 {
		t.Fatalf("first poll took %d (%v), want 100", n, err)
	}
	// The claim came back full: the next asks for 200. A handler with room
	// for 50 of a queue of 1000 is not claimed for.
	h.setCapacity(50)
	if n, err := p.PollOnce(ctx); err != nil || n != 0 {
		t.Fatalf("poll with room for 50 took %d (%v), want 0", n, err)
	}
	h.setCapacity(200)
	if n, err := p.PollOnce(ctx); err != nil || n != 200 {
		t.Fatalf("poll with room for 200 took %d (%v), want 200", n, err)
	}
	// Room for the whole claim of 400.
	h.setCapacity(500)
	if n, err := p.PollOnce(ctx); err != nil || n != 400 {
		t.Fatalf("poll with room for 500 took %d (%v), want 400", n, err)
	}
	// 300 rows are left: the claim of 400 comes back short, the backlog is
	// gone, and any room is claimed for.
	h.setCapacity(1000)
	if n, err := p.PollOnce(ctx); err != nil || n != 300 {
		t.Fatalf("poll of the rest took %d (%v), want 300", n, err)
	}
	st.add(t, "more", 10, time.Now().Add(-time.Minute))
	h.setCapacity(5)
	if n, err := p.PollOnce(ctx); err != nil || n != 5 {
		t.Fatalf("poll without a backlog, room for 5, took %d (%v), want 5", n, err)
	}
}
