package main

import (
	"context"
	"fmt"
	"time"
)

// deadBlocked lists the keys of ordered aggregate types held up by a DEAD
// head event.
func (a *app) deadBlocked(ctx context.Context, args []string) error {
	fs := a.command("dead blocked")
	lf := newListFilter(fs, "keys")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.parse(args); err != nil {
		return err
	}
	f, err := lf.filter("dead blocked", fs)
	if err != nil {
		return err
	}
	ctx, s, m, err := a.connectManager(ctx, 0)
	if err != nil {
		return err
	}
	defer s.Close()
	keys, err := m.BlockedKeys(ctx, f)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]blockedKeyJSON, len(keys))
		for i, k := range keys {
			out[i] = blockedKeyJSON{AggregateType: k.AggregateType, AggregateID: k.AggregateID, EventID: k.EventID,
				EventType: k.EventType, Seq: k.Seq, Waiting: k.Waiting, DeadAt: k.DeadAt.UTC(), LastError: k.LastError}
		}
		return writeJSON(a.stdout, out)
	}
	for _, k := range keys {
		fmt.Fprintf(a.stdout, "%s/%s  head=%s seq=%d type=%s waiting=%d dead_at=%s last_error=%s\n",
			k.AggregateType, k.AggregateID, k.EventID, k.Seq, k.EventType, k.Waiting,
			k.DeadAt.UTC().Format(time.RFC3339), oneLine(k.LastError, 120))
	}
	return nil
}

// blockedKeyJSON is a blocked key in --json output, named as stats --json
// and dead list --json name their fields.
type blockedKeyJSON struct {
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	EventID       string    `json:"event_id"` // the dead head
	EventType     string    `json:"event_type"`
	Seq           int64     `json:"seq"`
	Waiting       int64     `json:"waiting"`
	DeadAt        time.Time `json:"dead_at"`
	LastError     string    `json:"last_error"`
}

// deadSkip moves the keys of the given DEAD ordered heads past them.
func (a *app) deadSkip(ctx context.Context, args []string) error {
	fs := a.command("dead skip")
	yes, dryRun := confirmFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	ids := fs.Args()
	if len(ids) == 0 {
		return usagef("dead skip: give at least one event ID")
	}
	for _, id := range ids {
		fmt.Fprintf(a.stdout, "would skip %s (it stays DEAD; the next event of its key is delivered)\n", id)
	}
	if ok, err := a.confirmed(*yes, *dryRun); !ok {
		return err
	}
	ctx, s, m, err := a.connectManager(ctx, 0)
	if err != nil {
		return err
	}
	defer s.Close()
	n, err := m.Skip(ctx, ids...)
	if err != nil {
		return err
	}
	switch left := int64(len(ids)) - n; {
	case left == 0:
		fmt.Fprintf(a.stdout, "skipped %d\n", n)
		return nil
	case len(ids) == 1:
		fmt.Fprintf(a.stdout, "skipped 0 of 1 (%s is not the DEAD head of a key)\n", ids[0])
	case left == 1:
		fmt.Fprintf(a.stdout, "skipped %d of %d (the other is not the DEAD head of a key)\n", n, len(ids))
	default:
		fmt.Fprintf(a.stdout, "skipped %d of %d (the other %d are not the DEAD head of a key)\n", n, len(ids), left)
	}
	return exitCode(exitNotFound)
}
