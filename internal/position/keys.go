package position

import (
	"sync"

	"github.com/outboxkit/outbox/core"
)

// keys is the reader's per-key order for the events of ordered aggregate
// types (docs/design/position.md, "Ordered aggregate types"). Each key the
// reader holds events of has a queue, in the order the reader first saw
// them: the first is the key's head, handed to the dispatcher; the others
// wait in memory until it resolves (DONE, DEAD under core.DeadContinues).
// A head that fails moves its key to the claim path's ordered delivery
// (Log.Divert) with the events queued behind it; the key is then diverted:
// the events of it the reader reads later follow them there, until the key
// table shows the key finished.
//
// Every event in a queue is in the tracker's flight set, so the floor waits
// for it; a diverted event is resolved once its row left STREAM.
type keys struct {
	mu       sync.Mutex
	queues   map[Key]*keyQueue
	byID     map[string]Key // the key of each queued event
	diverted map[Key]bool
	pending  map[Key][]Row // read for diverted keys, to divert
	waiting  int           // events queued behind a head
}

type keyQueue struct {
	rows []Row // rows[0]: the head
	// failing: the head's failure is being written; nothing goes on.
	failing bool
}

func newKeys() *keys {
	k := &keys{}
	k.reset(nil)
	return k
}

// reset forgets every queue and starts from the diverted keys open.
func (k *keys) reset(open []Key) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.queues, k.byID, k.pending, k.waiting = map[Key]*keyQueue{}, map[string]Key{}, map[Key][]Row{}, 0
	k.diverted = make(map[Key]bool, len(open))
	for _, key := range open {
		k.diverted[key] = true
	}
}

func keyOf(ev core.Event) Key {
	return Key{AggregateType: ev.AggregateType(), AggregateID: ev.AggregateID()}
}

// add takes a row of an ordered aggregate type the reader read, and reports
// whether to hand it to the dispatcher now: it is its key's new head, or
// the head given back and read again.
func (k *keys) add(row Row) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := keyOf(row.Event)
	if k.diverted[key] {
		k.pending[key] = append(k.pending[key], row)
		return false
	}
	q := k.queues[key]
	if q == nil {
		k.queues[key] = &keyQueue{rows: []Row{row}}
		k.byID[row.ID] = key
		return true
	}
	if q.rows[0].ID == row.ID {
		return !q.failing
	}
	for _, r := range q.rows[1:] {
		if r.ID == row.ID {
			return false
		}
	}
	q.rows = append(q.rows, row)
	k.byID[row.ID] = key
	k.waiting++
	return false
}

// holds reports whether id is queued, and its key.
func (k *keys) holds(id string) (Key, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, ok := k.byID[id]
	return key, ok
}

// finish records that the head id resolved and returns the key's next
// event to hand over, if any.
func (k *keys) finish(id string) (Row, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, ok := k.byID[id]
	if !ok {
		return Row{}, false
	}
	q := k.queues[key]
	if q == nil || q.rows[0].ID != id {
		return Row{}, false
	}
	delete(k.byID, id)
	q.rows = q.rows[1:]
	if len(q.rows) == 0 {
		delete(k.queues, key)
		return Row{}, false
	}
	k.waiting--
	return q.rows[0], true
}

// beginDivert marks the queue of the head id failing and returns its key
// and the ids of its events, head first; false when id is no head.
func (k *keys) beginDivert(id string) (Key, []string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	key, ok := k.byID[id]
	if !ok {
		return Key{}, nil, false
	}
	q := k.queues[key]
	if q == nil || q.rows[0].ID != id {
		return Key{}, nil, false
	}
	q.failing = true
	ids := make([]string, len(q.rows))
	for i, r := range q.rows {
		ids[i] = r.ID
	}
	return key, ids, true
}

// endDivert records that the events ids of key are the claim path's: the
// key is diverted, and the events queued since beginDivert are pending.
func (k *keys) endDivert(key Key, ids []string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	q := k.queues[key]
	delete(k.queues, key)
	k.diverted[key] = true
	if q == nil {
		return
	}
	moved := make(map[string]bool, len(ids))
	for _, id := range ids {
		moved[id] = true
	}
	for i, r := range q.rows {
		delete(k.byID, r.ID)
		if i > 0 {
			k.waiting--
		}
		if !moved[r.ID] {
			k.pending[key] = append(k.pending[key], r)
		}
	}
}

// takePending returns the events read for diverted keys, and forgets them.
func (k *keys) takePending() map[Key][]Row {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.pending) == 0 {
		return nil
	}
	p := k.pending
	k.pending = map[Key][]Row{}
	return p
}

// repend puts back the pending rows of key whose move failed.
func (k *keys) repend(key Key, rows []Row) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pending[key] = append(rows, k.pending[key]...)
}

// undivert records that key has no unfinished event in the claim path any
// more: its events are position delivery's again.
func (k *keys) undivert(key Key) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.diverted, key)
}

// full reports whether the events waiting behind heads reached max: the
// reader reads no new rows until heads resolve.
func (k *keys) full(max int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.waiting >= max
}

// counts returns how many keys have queues and how many events wait in
// them, and how many keys are diverted.
func (k *keys) counts() (queues, waiting, diverted int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.queues), k.waiting, len(k.diverted)
}
