package position

import "testing"

// TestTrackerGiveBackDuringRead: the hot queue gives an event back while
// the read that returned its row is being recorded (the row was skipped as
// the hot path's, the cursor not yet moved past it). The position must
// stay open and be read again.
func TestTrackerGiveBackDuringRead(t *testing.T) {
	tr := newTracker(10)
	tr.load(State{}, 0)
	if !tr.takeHot("a", 1) {
		t.Fatal("hot path refused")
	}
	if tr.seenAfter(1, "a", 1) != skip {
		t.Fatal("a hot row was handed over")
	}
	tr.giveBack("a")
	if st := tr.state(); st.Floor != 0 {
		t.Fatalf("state %+v: the floor passed a position given back", st)
	}
	if rs := tr.startCycle(); len(rs) != 1 || rs[0] != (Range{Lo: 1, Hi: 1}) {
		t.Fatalf("cycle re-reads %v, want position 1", rs)
	}
}
