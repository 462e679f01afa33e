package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// riverArgs is the job of event N: River's unit of work carries the
// event's document as its arguments.
type riverArgs struct {
	N       int             `json:"n"`
	Payload json.RawMessage `json:"payload"`
}

func (riverArgs) Kind() string { return "order_placed" }

type riverWorker struct {
	river.WorkerDefaults[riverArgs]
	r *riverQ
}

func (w *riverWorker) Work(_ context.Context, job *river.Job[riverArgs]) error {
	w.r.rec.deliver(job.Args.N)
	return nil
}

// riverQ is River as its documentation uses it: a pgx pool, a migrated
// schema of its own, jobs inserted with InsertTx in the business
// transaction and worked by one queue's workers. River runs on PostgreSQL
// only.
type riverQ struct {
	srv        *server
	pool       *pgxpool.Pool
	schema     string
	biz        string
	client     *river.Client[pgx.Tx]
	rec        *recorder
	maxWorkers int
	poll       time.Duration
}

func (r *riverQ) setup(ctx context.Context, srv *server, writers int) error {
	r.srv = srv
	cfg, err := pgxpool.ParseConfig(srv.dsn)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(writers + 8)
	if r.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return err
	}
	r.schema, r.biz = uniqueName("river"), uniqueName("biz")
	if _, err := r.pool.Exec(ctx, "CREATE SCHEMA "+r.schema); err != nil {
		return err
	}
	if _, err := r.pool.Exec(ctx, srv.bizDDL(r.biz)); err != nil {
		return err
	}
	quiet := slog.New(slog.DiscardHandler)
	driver := riverpgxv5.New(r.pool)
	m, err := rivermigrate.New(driver, &rivermigrate.Config{Schema: r.schema, Logger: quiet})
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrate: %w", err)
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &riverWorker{r: r})
	r.client, err = river.NewClient(driver, &river.Config{
		Schema:            r.schema,
		Logger:            quiet,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: r.maxWorkers}},
		Workers:           workers,
		FetchCooldown:     river.FetchCooldownMin,
		FetchPollInterval: r.poll,
	})
	return err
}

func (r *riverQ) write(ctx context.Context, i int, rec *recorder) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, r.srv.rebind(bizInsert(r.biz)), bizArgs(i)...); err != nil {
		return err
	}
	if _, err := r.client.InsertTx(ctx, tx, riverArgs{N: i, Payload: payload(i)}, nil); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	rec.commit(i)
	return nil
}

func (r *riverQ) fill(ctx context.Context, n int) error {
	const chunk = 1000
	params := make([]river.InsertManyParams, 0, chunk)
	for i := range n {
		params = append(params, river.InsertManyParams{Args: riverArgs{N: i, Payload: payload(i)}})
		if len(params) == chunk || i == n-1 {
			if _, err := r.client.InsertManyFast(ctx, params); err != nil {
				return err
			}
			params = params[:0]
		}
	}
	return nil
}

func (r *riverQ) start(ctx context.Context, rec *recorder) error {
	r.rec = rec
	return r.client.Start(ctx)
}

func (r *riverQ) stop(ctx context.Context) error {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return r.client.Stop(c)
}

func (r *riverQ) teardown(ctx context.Context) {
	if r.pool == nil {
		return
	}
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if r.client != nil {
		_ = r.client.Stop(c)
	}
	for _, q := range []string{"DROP SCHEMA IF EXISTS " + r.schema + " CASCADE", "DROP TABLE IF EXISTS " + r.biz} {
		if _, err := r.pool.Exec(c, q); err != nil {
			fmt.Printf("    %s: %v\n", q, err)
		}
	}
	r.pool.Close()
}
