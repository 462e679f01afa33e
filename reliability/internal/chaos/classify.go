package chaos

import (
	"cmp"
	"slices"
	"time"
)

// Delivery is one committed listener call, as the deliveries table records
// it.
type Delivery struct {
	EventID, Owner    string
	Started, Finished time.Time
}

// Kill is one SIGKILL of a worker process: its owner token, when it was dead
// (after the supervisor reaped it, so every delivery it committed finished
// before), and the events it still held then (leased, outcome not written).
type Kill struct {
	Owner string
	At    time.Time
	Held  []string
}

// KillReport is what one kill caused.
type KillReport struct {
	Kill
	// Duplicates counts the later deliveries explained by this kill.
	Duplicates int
	// Recovery is the time from the kill until every event it held had been
	// delivered by another process (0 if it held none), leaving out the
	// events in Rekilled.
	Recovery time.Duration
	// Rekilled lists the held events that a later kill found held again by
	// the process that had taken them over: their recovery is that kill's.
	Rekilled []string
	// Settled lists the held events no other process delivered after the
	// kill: the killed process had sent their outcome, and the server
	// applied it after the process was gone (the supervisor reads the leases
	// once the process is reaped, but the server may still be running its
	// last statements).
	Settled []string
}

// Classification sorts every delivery beyond an event's first into those a
// kill explains and those nothing explains.
type Classification struct {
	Kills       []KillReport
	Explained   int
	Unexplained []Delivery
	// Gaps holds, for each explained duplicate, how long before its kill
	// the killed process's delivery had finished: the time in which the
	// delivery's outcome could have been written and was not.
	Gaps []time.Duration
}

// Classify classifies the duplicates in ds against kills.
//
// A later delivery of an event is explained by a kill when an earlier
// delivery of that event was made by the killed process, finished before it
// died, and the later one started after it died: the killed process
// delivered the event but died before writing its outcome, and the later
// delivery is the lease timeout handing it to another process. A duplicate
// whose later delivery started before the kill (two processes holding the
// event at once: a lost lease), or whose earlier deliveries were all by
// processes that were never killed, is unexplained.
func Classify(ds []Delivery, kills []Kill) Classification {
	killOf := make(map[string]int, len(kills))
	c := Classification{Kills: make([]KillReport, len(kills))}
	for i, k := range kills {
		killOf[k.Owner] = i
		c.Kills[i].Kill = k
	}
	byEvent := map[string][]Delivery{}
	for _, d := range ds {
		byEvent[d.EventID] = append(byEvent[d.EventID], d)
	}
	for _, evs := range byEvent {
		slices.SortFunc(evs, func(a, b Delivery) int { return a.Started.Compare(b.Started) })
		for j := 1; j < len(evs); j++ {
			later := evs[j]
			explained := false
			// The nearest earlier delivery that a kill explains.
			for i := j - 1; i >= 0 && !explained; i-- {
				k, ok := killOf[evs[i].Owner]
				if !ok {
					continue
				}
				at := kills[k].At
				if !evs[i].Finished.After(at) && !later.Started.Before(at) {
					c.Kills[k].Duplicates++
					c.Gaps = append(c.Gaps, at.Sub(evs[i].Finished))
					explained = true
				}
			}
			if explained {
				c.Explained++
			} else {
				c.Unexplained = append(c.Unexplained, later)
			}
		}
	}
	slices.SortFunc(c.Unexplained, func(a, b Delivery) int {
		return cmp.Or(cmp.Compare(a.EventID, b.EventID), a.Started.Compare(b.Started))
	})

	// heldAt[id] lists the kills that found id held, in kill order.
	heldAt := map[string][]time.Time{}
	for _, k := range kills {
		for _, id := range k.Held {
			heldAt[id] = append(heldAt[id], k.At)
		}
	}
	for i := range c.Kills {
		kr := &c.Kills[i]
	held:
		for _, id := range kr.Held {
			// The first delivery by another process that started after the
			// kill: before it, the event still waited for the dead lease.
			var done time.Time
			for _, d := range byEvent[id] {
				if d.Owner != kr.Owner && !d.Started.Before(kr.At) {
					done = d.Finished
					break
				}
			}
			if done.IsZero() {
				kr.Settled = append(kr.Settled, id)
				continue
			}
			for _, at := range heldAt[id] {
				if at.After(kr.At) && at.Before(done) {
					kr.Rekilled = append(kr.Rekilled, id)
					continue held
				}
			}
			kr.Recovery = max(kr.Recovery, done.Sub(kr.At))
		}
	}
	return c
}
