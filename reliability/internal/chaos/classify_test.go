package chaos

import (
	"slices"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	d := func(id, owner string, start, end float64) Delivery {
		return Delivery{EventID: id, Owner: owner, Started: at(start), Finished: at(end)}
	}
	kills := []Kill{
		{Owner: "A", At: at(10), Held: []string{"e1", "e2", "e4"}},
		{Owner: "B", At: at(20), Held: []string{"e3"}},
	}
	ds := []Delivery{
		// e1: delivered by A before its kill, again by C after: explained by A.
		d("e1", "A", 9, 9.1), d("e1", "C", 15, 15.2),
		// e2: held by A but not yet delivered: no duplicate, recovered at 16.
		d("e2", "C", 15.5, 16),
		// e3: A, then B after A's kill, then C after B's kill: both explained.
		d("e3", "A", 8, 8.5), d("e3", "B", 15, 15.1), d("e3", "C", 25, 25.5),
		// e4: held by A, never delivered by anyone else: A's outcome landed
		// after its death.
		d("e4", "A", 9.5, 9.6),
		// e5: two live processes at once (a lost lease): unexplained.
		d("e5", "C", 1, 1.1), d("e5", "D", 2, 2.1),
		// e6: the later delivery started before A died: unexplained.
		d("e6", "A", 3, 3.1), d("e6", "C", 9.9, 10.5),
		// e7: delivered once.
		d("e7", "C", 4, 4.1),
	}
	c := Classify(ds, kills)
	if c.Explained != 3 {
		t.Errorf("explained %d, want 3", c.Explained)
	}
	if len(c.Unexplained) != 2 || c.Unexplained[0].EventID != "e5" || c.Unexplained[1].EventID != "e6" {
		t.Errorf("unexplained %+v, want e5 by D and e6 by C", c.Unexplained)
	}
	a, b := c.Kills[0], c.Kills[1]
	if a.Duplicates != 2 || b.Duplicates != 1 {
		t.Errorf("duplicates per kill %d, %d; want 2, 1", a.Duplicates, b.Duplicates)
	}
	if a.Recovery != 6*time.Second || len(a.Settled) != 1 || a.Settled[0] != "e4" {
		t.Errorf("kill A: recovery %s, settled %v; want 6s, [e4]", a.Recovery, a.Settled)
	}
	if len(a.Rekilled) != 0 || len(b.Rekilled) != 0 {
		t.Errorf("rekilled %v, %v; want none", a.Rekilled, b.Rekilled)
	}
	if b.Recovery != 5500*time.Millisecond || len(b.Settled) != 0 {
		t.Errorf("kill B: recovery %s, settled %v; want 5.5s, none", b.Recovery, b.Settled)
	}
	// The explained duplicates' deliveries finished 0.9 s (e1), 1.5 s (e3
	// by A) and 4.9 s (e3 by B) before their kills.
	gaps := slices.Sorted(slices.Values(c.Gaps))
	if want := []time.Duration{900 * time.Millisecond, 1500 * time.Millisecond, 4900 * time.Millisecond}; !slices.Equal(gaps, want) {
		t.Errorf("gaps %v, want %v", gaps, want)
	}
	if s := Summarize(ds); s.Events != 7 || s.Deliveries != 12 || s.Duplicated != 4 {
		t.Errorf("summary %+v, want 7 events, 12 deliveries, 4 duplicated", s)
	}
}

// An event the process that took it over still held at the next kill
// counts towards that kill's recovery, not the first one's.
func TestClassifyRekilled(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	kills := []Kill{
		{Owner: "A", At: at(10), Held: []string{"e1", "e2"}},
		{Owner: "B", At: at(16), Held: []string{"e1"}},
	}
	ds := []Delivery{
		{EventID: "e1", Owner: "C", Started: at(21), Finished: at(21.5)},
		{EventID: "e2", Owner: "C", Started: at(15), Finished: at(15.2)},
	}
	c := Classify(ds, kills)
	a, b := c.Kills[0], c.Kills[1]
	if a.Recovery != 5200*time.Millisecond || len(a.Rekilled) != 1 || a.Rekilled[0] != "e1" {
		t.Errorf("kill A: recovery %s, rekilled %v; want 5.2s, [e1]", a.Recovery, a.Rekilled)
	}
	if b.Recovery != 5500*time.Millisecond || len(b.Rekilled) != 0 {
		t.Errorf("kill B: recovery %s, rekilled %v; want 5.5s, none", b.Recovery, b.Rekilled)
	}
}
