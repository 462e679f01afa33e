package main

import (
	"context"
	"database/sql"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/pgxtx"
	"github.com/outboxkit/outbox/store"
)

// openInstance opens a pool of conns connections on tg and starts an
// instance on it, as a service would: on database/sql, or, with onPgx, on a
// pgxpool whose business transactions are pgxtx's and whose background side
// runs through pgx's database/sql adapter on the same pool.
func openInstance(ctx context.Context, c *config, tg *target, st store.SchemaManager, conns int, l core.Listener, onPgx bool) (*instance, error) {
	if !onPgx {
		db, err := tg.open(conns)
		if err != nil {
			return nil, err
		}
		in, err := startInstance(ctx, c, st, db, l)
		if err != nil {
			_ = db.Close()
			return nil, err
		}
		return in, nil
	}
	if tg.openPgx == nil {
		return nil, errors.New("pgx runs need PostgreSQL")
	}
	pool, err := tg.openPgx(ctx, conns)
	if err != nil {
		return nil, err
	}
	var db *sql.DB = stdlib.OpenDBFromPool(pool)
	in, err := startInstance(ctx, c, st, db, l)
	if err != nil {
		_ = db.Close()
		pool.Close()
		return nil, err
	}
	txm, err := pgxtx.New(pool, pgxtx.Config{})
	if err != nil {
		_ = in.close(ctx)
		_ = db.Close()
		pool.Close()
		return nil, err
	}
	in.pool = pool
	in.do = func(ctx context.Context, fn func(ctx context.Context) error) error {
		return txm.Do(ctx, func(ctx context.Context, _ pgx.Tx) error { return fn(ctx) })
	}
	return in, nil
}
