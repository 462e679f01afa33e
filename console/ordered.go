package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dead"
)

// Ordered delivery (core.Ordering): a DEAD event of an ordered aggregate
// type either holds its key up (it is the key's DEAD head: its later events
// wait) or no longer does (it was skipped, or died under DeadContinues, and
// the key has moved past it). Replaying a head delivers it and lets the key
// go on; replaying one the key has moved past delivers it out of the key's
// order. So "replay all" replays the heads and the unordered events and
// leaves the others out, and the pages mark which is which.

const (
	// maxReplayHeads caps the DEAD heads one "replay all" replays; a
	// second one replays the next.
	maxReplayHeads = 10_000
	// leftOutShown is how many of the events "replay all" leaves out its
	// confirmation page lists.
	leftOutShown = 20
)

// ordering returns the store's ordering; nil when it orders nothing.
func (c *Console) ordering() core.Ordering {
	if o, ok := core.StoreAs[core.OrderedStore](c.cfg.Store); ok {
		return o.Ordering()
	}
	return nil
}

// heads returns the DEAD heads of the blocked keys matching f's types, by
// event id, at most limit of them; nil on a store that orders nothing.
func (c *Console) heads(ctx context.Context, f core.DeadFilter, limit int) (map[string]core.BlockedKey, error) {
	if len(c.ordering()) == 0 {
		return nil, nil
	}
	keys, err := c.dead.BlockedKeys(ctx, core.DeadFilter{EventType: f.EventType, AggregateType: f.AggregateType, Limit: limit})
	if err != nil {
		return nil, err
	}
	out := make(map[string]core.BlockedKey, len(keys))
	for _, k := range keys {
		out[k.EventID] = k
	}
	return out, nil
}

// replayPlan is what "replay all" does with the DEAD events matching a
// filter on a store that orders some aggregate types.
type replayPlan struct {
	// Pairs are the (aggregate type, event type) pairs of unordered types
	// with DEAD events matching the filter; Limit holds how many.
	Pairs []core.DeadFilter
	// Heads are the DEAD heads of blocked keys matching the filter, oldest
	// first: replaying one unblocks its key.
	Heads []core.BlockedKey
	// HeadsCapped: there are more heads than maxReplayHeads.
	HeadsCapped bool
	// LeftOut counts the DEAD events of ordered types that are not a key's
	// head; Examples are the first of them.
	LeftOut  int64
	Examples []core.Event
}

// Replayable is how many events the plan replays.
func (p replayPlan) Replayable() int64 {
	n := int64(len(p.Heads))
	for _, f := range p.Pairs {
		n += int64(f.Limit)
	}
	return n
}

// plan returns the replay plan of f's DEAD events on a store with ordering.
func (c *Console) plan(ctx context.Context, f core.DeadFilter, ordering core.Ordering) (replayPlan, error) {
	var p replayPlan
	types, err := c.insp.CountByType(ctx, c.cfg.DB)
	if err != nil {
		return p, err
	}
	var orderedPairs []core.DeadFilter
	var orderedDead int64
	for _, tc := range types {
		if tc.Dead == 0 || (f.EventType != "" && tc.EventType != f.EventType) ||
			(f.AggregateType != "" && tc.AggregateType != f.AggregateType) {
			continue
		}
		pair := core.DeadFilter{AggregateType: tc.AggregateType, EventType: tc.EventType, Limit: int(tc.Dead)}
		if _, ordered := ordering.Ordered(tc.AggregateType); ordered {
			orderedPairs = append(orderedPairs, pair)
			orderedDead += tc.Dead
			continue
		}
		p.Pairs = append(p.Pairs, pair)
	}
	if orderedDead == 0 {
		return p, nil
	}
	if p.Heads, err = c.dead.BlockedKeys(ctx, core.DeadFilter{EventType: f.EventType, AggregateType: f.AggregateType,
		Limit: maxReplayHeads + 1}); err != nil {
		return p, err
	}
	if len(p.Heads) > maxReplayHeads {
		p.Heads, p.HeadsCapped = p.Heads[:maxReplayHeads], true
	}
	p.LeftOut = max(orderedDead-int64(len(p.Heads)), 0)
	if p.LeftOut == 0 || p.HeadsCapped {
		return p, nil
	}
	head := make(map[string]bool, len(p.Heads))
	for _, k := range p.Heads {
		head[k.EventID] = true
	}
	for _, pair := range orderedPairs {
		pair.Limit = min(pair.Limit, len(head)+leftOutShown)
		evs, err := c.dead.List(ctx, pair)
		if err != nil && len(evs) == 0 {
			return p, err
		}
		for _, ev := range evs {
			if !head[ev.ID()] && len(p.Examples) < leftOutShown {
				p.Examples = append(p.Examples, ev)
			}
		}
	}
	return p, nil
}

// replayPlanned replays what p plans, at most limit events: the unordered
// pairs' events oldest first, then the heads. It returns how many it
// replayed.
func (c *Console) replayPlanned(ctx context.Context, p replayPlan, limit int64) (int64, error) {
	var total int64
	for _, pair := range p.Pairs {
		if total >= limit {
			return total, nil
		}
		pair.Limit = int(min(int64(pair.Limit), limit-total))
		n, err := c.dead.ReplayAll(ctx, pair, nil)
		total += n
		if err != nil {
			return total, err
		}
	}
	batch := c.cfg.ReplayBatchSize
	if batch == 0 {
		batch = dead.DefaultBatchSize
	}
	heads := p.Heads[:min(int64(len(p.Heads)), max(limit-total, 0))]
	for len(heads) > 0 {
		chunk := heads[:min(batch, len(heads))]
		heads = heads[len(chunk):]
		ids := make([]string, len(chunk))
		for i, k := range chunk {
			ids[i] = k.EventID
		}
		n, err := c.cfg.Store.ReplayDead(ctx, c.cfg.DB, ids, c.cfg.Now())
		total += n
		if err != nil {
			return total, fmt.Errorf("replay dead heads: %w", err)
		}
	}
	return total, nil
}

// --- skip ---

type skipData struct {
	Event core.Event
	Key   *core.BlockedKey // nil: the event is not the DEAD head of a blocked key
}

// skipConfirm shows what skipping an ordered DEAD head does, and the form
// that does it.
func (c *Console) skipConfirm(w http.ResponseWriter, r *http.Request) {
	ev, ok := c.eventOf(w, r)
	if !ok {
		return
	}
	d := skipData{Event: ev}
	if key, err := c.blockedKeyOf(r.Context(), ev); err != nil {
		c.failErr(w, r, err)
		return
	} else if key != nil {
		d.Key = key
	}
	c.render(w, r, http.StatusOK, "skip", page{Page: "dead", CSRF: c.csrfToken(w, r), Data: d})
}

// blockedKeyOf returns the blocked key whose DEAD head ev is, or nil.
func (c *Console) blockedKeyOf(ctx context.Context, ev core.Event) (*core.BlockedKey, error) {
	if ev.Status != core.StatusDead || ev.Seq == 0 || len(c.ordering()) == 0 {
		return nil, nil
	}
	// Heads are listed oldest first, as DEAD events are: among the heads
	// of its types, ev is within the first MaxPageSize unless that many
	// older heads exist; then it is not found, and the page says less.
	heads, err := c.heads(ctx, core.DeadFilter{EventType: ev.Type(), AggregateType: ev.AggregateType()}, MaxPageSize)
	if err != nil {
		return nil, err
	}
	if k, ok := heads[ev.ID()]; ok {
		return &k, nil
	}
	return nil, nil
}

// skip moves the key of a DEAD ordered head past it (dead.Manager.Skip).
func (c *Console) skip(w http.ResponseWriter, r *http.Request) {
	id, err := idParam(r.PostForm)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	n, err := c.dead.Skip(r.Context(), id)
	if err != nil {
		c.failErr(w, r, err)
		return
	}
	q := url.Values{}
	if n > 0 {
		q.Set("skipped", id)
	} else {
		q.Set("not-skipped", id)
	}
	seeOther(w, "dead?"+q.Encode())
}

// deadMarks are the ordered-delivery marks of the events of a page, by id.
type deadMarks struct {
	Heads   map[string]core.BlockedKey // DEAD heads of blocked keys
	Ordered bool                       // the store orders some aggregate types
}

// Head returns the blocked key ev is the head of, or nil.
func (m deadMarks) Head(ev core.Event) *core.BlockedKey {
	if k, ok := m.Heads[ev.ID()]; ok {
		return &k
	}
	return nil
}

// MovedPast reports whether ev is an ordered event its key has moved past.
func (m deadMarks) MovedPast(ev core.Event) bool {
	_, head := m.Heads[ev.ID()]
	return m.Ordered && ev.Seq != 0 && !head
}
