package testdb

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PgxPool returns a pgx pool of at most four connections on
// OUTBOX_POSTGRES_DSN, closed when the test ends, or skips (fails under
// OUTBOX_REQUIRE_DBS=1) when the variable is unset or the server does not
// answer.
func PgxPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return PgxPoolWith(t, nil)
}

// PgxPoolWith is PgxPool with its configuration changed by configure
// (nil: none) before the pool is made.
func PgxPoolWith(t testing.TB, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	dsn := os.Getenv(PostgresEnv)
	if dsn == "" {
		skipOrFail(t, "PostgreSQL tests: set %s=%s to run", PostgresEnv, examplePostgresDSN)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("testdb: %s: %v", PostgresEnv, err)
	}
	cfg.MaxConns = poolSize
	if configure != nil {
		configure(cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("testdb: %s: %v", PostgresEnv, err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		skipOrFail(t, "PostgreSQL tests: server of %s unreachable: %v", PostgresEnv, err)
	}
	return pool
}
