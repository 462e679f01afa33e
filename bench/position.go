package main

import (
	"context"
	"fmt"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/store"
)

// positional marks a store whose instances run position delivery
// (outbox.DeliveryPosition): startInstance wires the position reader.
type positional struct{ store.SchemaManager }

func (s positional) Unwrap() core.Store { return s.SchemaManager }

// positionLog returns the position log of st, nil when its database has
// none (MySQL, MariaDB).
func positionLog(st core.Store) position.Log {
	return position.LogOf(st)
}

// hasPosition reports whether tg runs position delivery.
func (tg *target) hasPosition() bool {
	return tg.name == "postgres" || tg.name == "sqlite" || tg.name == "mysql"
}

// copyStream fills t with the rows of tmpl as STREAM rows, positions in
// creation order: the backlog of a position drain.
func copyStream(ctx context.Context, c *config, tmpl *table, kind string) (*table, error) {
	t, err := newTable(ctx, tmpl.tg, tmpl.db, kind)
	if err != nil {
		return nil, err
	}
	if err := noAutovacuum(ctx, c, t); err != nil {
		t.drop(ctx)
		return nil, err
	}
	cols := "event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, attempts, available_at, created_at"
	q := "INSERT INTO " + t.st.Table() + " (" + cols + ", status, pos) SELECT " + cols +
		", 5, ROW_NUMBER() OVER (ORDER BY created_at, event_id) FROM " + tmpl.st.Table()
	if _, err := tmpl.db.ExecContext(ctx, q); err != nil {
		t.drop(ctx)
		return nil, fmt.Errorf("copy backlog as STREAM rows: %w", err)
	}
	if err := analyze(ctx, t); err != nil {
		t.drop(ctx)
		return nil, err
	}
	return t, nil
}
