package main

import (
	"context"
	"fmt"
	"time"

	"github.com/outboxkit/outbox/core"
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
		if keys == nil {
			keys = []core.BlockedKey{}
		}
		return writeJSON(a.stdout, keys)
	}
	for _, k := range keys {
		fmt.Fprintf(a.stdout, "%s/%s  head=%s seq=%d type=%s waiting=%d dead_at=%s last_error=%s\n",
			k.AggregateType, k.AggregateID, k.EventID, k.Seq, k.EventType, k.Waiting,
			k.DeadAt.UTC().Format(time.RFC3339), oneLine(k.LastError, 120))
	}
	return nil
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
	fmt.Fprintf(a.stdout, "skipped %d of %d (the others are not the DEAD head of a key)\n", n, len(ids))
	if n < int64(len(ids)) {
		return exitCode(exitNotFound)
	}
	return nil
}
