package main

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// openPgx returns a new pgx pool of at most conns connections, as a
// separate process on pgx would have.
func (s *server) openPgx(ctx context.Context, conns int) (*pgxpool.Pool, error) {
	if !s.pg() {
		return nil, errors.New("pgx runs on PostgreSQL only")
	}
	cfg, err := pgxpool.ParseConfig(s.dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// inPgxTx runs fn in a transaction begun on pool as pgx users write it
// (Pool.Begin, then Commit), after the business row, and notes transaction
// i's commit.
func (b *base) inPgxTx(ctx context.Context, pool *pgxpool.Pool, i int, rec *recorder, fn func(tx pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, b.bizQ, bizArgs(i)...); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	rec.commit(i)
	return nil
}

// bizPgx is the business transaction alone on pgx: the ceiling of W1 for
// a service on pgx that begins its transactions itself.
type bizPgx struct {
	base
	pool *pgxpool.Pool
}

func (b *bizPgx) setup(ctx context.Context, srv *server, writers int) error {
	if err := b.setupBase(ctx, srv, 2); err != nil {
		return err
	}
	var err error
	b.pool, err = srv.openPgx(ctx, writers)
	return err
}

func (b *bizPgx) write(ctx context.Context, i int, rec *recorder) error {
	return b.inPgxTx(ctx, b.pool, i, rec, func(pgx.Tx) error { return nil })
}
func (b *bizPgx) fill(context.Context, int) error        { return nil }
func (b *bizPgx) start(context.Context, *recorder) error { return nil }
func (b *bizPgx) stop(context.Context) error             { return nil }
func (b *bizPgx) teardown(ctx context.Context) {
	if b.pool != nil {
		b.pool.Close()
	}
	b.teardownBase(ctx)
}
