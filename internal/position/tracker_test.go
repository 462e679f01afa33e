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

// TestTrackerHotPositionLearntLate: an INSERT held until COMMIT takes its
// event hot before its position is known. Whichever gives the position
// first, the INSERT's result or a read that returns the row, the row is
// the hot path's: skipped by the read, open until the hot path resolves
// it, read again when the hot path gives it up after a read passed it, and
// the reader's when the hot path gives it up before.
func TestTrackerHotPositionLearntLate(t *testing.T) {
	tr := newTracker(10)
	tr.load(State{}, 0)
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		if !tr.takeHot(id, 0) {
			t.Fatalf("hot path refused %s", id)
		}
	}
	if !tr.hotAhead() {
		t.Error("hotAhead is false with hot events whose positions are not known")
	}

	// a: a read returns its row first; b: its INSERT's result first.
	if tr.seenAfter(1, "a", 1) != skip {
		t.Fatal("a: a hot row was handed over")
	}
	tr.setHotPos("a", 1) // the INSERT's result, after the read
	tr.setHotPos("b", 2)
	if tr.seenAfter(2, "b", 1) != skip {
		t.Fatal("b: a hot row was handed over")
	}
	if st := tr.state(); st.Floor != 0 || len(st.Open) != 1 || st.Open[0] != (Range{Lo: 1, Hi: 2}) {
		t.Fatalf("state %+v: want positions 1 and 2 open until the hot path resolves them", st)
	}
	tr.resolve("a")
	tr.resolve("b")
	if st := tr.state(); st.Floor != 2 {
		t.Fatalf("state %+v: want the floor at 2 once both are resolved", st)
	}

	// c: its transaction rolled back (or its COMMIT's answer was lost)
	// before any read returned the row: the reader delivers it if it
	// commits.
	tr.dropHot("c")
	if tr.seenAfter(3, "c", 1) != deliver {
		t.Fatal("c: the row of an event the hot path gave up was not handed over")
	}

	// d: given up after a read passed it: read again.
	if tr.seenAfter(4, "d", 1) != skip {
		t.Fatal("d: a hot row was handed over")
	}
	tr.dropHot("d")
	if rs := tr.startCycle(); len(rs) != 1 || rs[0] != (Range{Lo: 4, Hi: 4}) {
		t.Fatalf("cycle re-reads %v, want position 4", rs)
	}

	// e: resolved before its position was known (not expected: the
	// INSERT's result comes before the COMMIT's): a read delivers it.
	tr.resolve("e")
	if tr.seenAfter(5, "e", 1) != deliver {
		t.Fatal("e: the row of an event resolved with no position was not handed over")
	}
}
