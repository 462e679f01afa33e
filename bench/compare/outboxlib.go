package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/pgxtx"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/txctx"
)

var (
	orderAgg    = core.AggregateName("Order")
	orderPlaced = core.EventName("OrderPlaced")
)

// ours is this library as a service wires it: outbox.New on the service's
// pool, events written in Do next to the business row, a listener per
// event type. instances > 1 runs that many MultiNode instances on one
// table, each on its own pool; the writers take them in turn.
type ours struct {
	base
	instances int
	workers   int // Dispatch.Workers; 0 = default
	batch     int // Poller.BatchSize; 0 = default
	delivery  outbox.Delivery
	pgx       bool       // each instance on a pgx pool: writes in pgxtx's Do, the rest through pgx's database/sql adapter
	hold      pgxtx.Hold // with pgx: pgxtx's Config.HoldWrites
	st        store.SchemaManager
	rec       *recorder
	obs       []*outbox.Outbox
	txms      []*pgxtx.Manager // with pgx, one per instance
	pools     []*closer
}

type closer struct{ close func() error }

func (o *ours) setup(ctx context.Context, srv *server, writers int) error {
	if err := o.setupBase(ctx, srv, 4); err != nil {
		return err
	}
	name := uniqueName("ours")
	var err error
	if srv.pg() {
		o.st, err = postgres.New(postgres.Config{Table: name})
	} else {
		o.st, err = mysql.New(mysql.Config{Table: name})
	}
	if err != nil {
		return err
	}
	if err := o.st.CreateSchema(ctx, o.db); err != nil {
		return err
	}
	mode := outbox.SingleNode
	if o.instances > 1 {
		mode = outbox.MultiNode
	}
	for range max(o.instances, 1) {
		conns := writers/max(o.instances, 1) + 8
		var db *sql.DB
		if o.pgx {
			pool, err := srv.openPgx(ctx, conns)
			if err != nil {
				return err
			}
			db = stdlib.OpenDBFromPool(pool)
			o.pools = append(o.pools, &closer{func() error { err := db.Close(); pool.Close(); return err }})
			txm, err := pgxtx.New(pool, pgxtx.Config{HoldWrites: o.hold, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				return err
			}
			o.txms = append(o.txms, txm)
		} else {
			if db, err = srv.open(conns); err != nil {
				return err
			}
			o.pools = append(o.pools, &closer{db.Close})
		}
		reg := core.NewRegistry()
		if err := reg.RegisterFunc(orderAgg, orderPlaced, func(_ context.Context, ev core.Event) error {
			n, _ := aggregateNo(ev.AggregateID())
			o.rec.deliver(n)
			return nil
		}); err != nil {
			return err
		}
		cfg := outbox.Config{DB: db, Store: o.st, Registry: reg, Mode: mode, Delivery: o.delivery,
			Logger: slog.New(slog.DiscardHandler)}
		cfg.Dispatch.Workers = o.workers
		cfg.Poller.BatchSize = o.batch
		ob, err := outbox.New(cfg)
		if err != nil {
			return err
		}
		o.obs = append(o.obs, ob)
	}
	return nil
}

// envelope is event i, its id generated, as a service leaves it: the
// listener finds the event's number in its aggregate id.
func (o *ours) envelope(i int) (core.Envelope, error) {
	return core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, AggregateType: orderAgg,
		AggregateID: aggregateID(i), JSON: payload(i)})
}

func (o *ours) write(ctx context.Context, i int, rec *recorder) error {
	env, err := o.envelope(i)
	if err != nil {
		return err
	}
	ob := o.obs[i%len(o.obs)]
	if o.pgx {
		return o.txms[i%len(o.txms)].Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, o.bizQ, bizArgs(i)...); err != nil {
				return err
			}
			t, _ := pgxtx.From(ctx)
			t.AfterCommit(func(context.Context) { rec.commit(i) })
			_, err := ob.Writer().Write(ctx, env)
			return err
		})
	}
	return ob.Do(ctx, func(ctx context.Context) error {
		tx, ok := txctx.From(ctx)
		if !ok {
			return errors.New("no transaction in context")
		}
		if _, err := tx.ExecContext(ctx, o.bizQ, bizArgs(i)...); err != nil {
			return err
		}
		// Registered before the writer's own hook, so it runs first: the
		// commit is noted as soon as COMMIT returned, before the hot path
		// hands the event to a worker.
		tx.AfterCommit(func(context.Context) { rec.commit(i) })
		_, err := ob.Writer().Write(ctx, env)
		return err
	})
}

// fill writes the backlog as the contender's writers would: claimable rows,
// or STREAM rows with positions in position delivery.
func (o *ours) fill(ctx context.Context, n int) error {
	const chunk = 1000
	insert := func(envs []core.Envelope) error { return o.st.Insert(ctx, o.db, envs, core.InsertOptions{}) }
	if o.delivery == outbox.DeliveryPosition {
		lg := position.LogOf(o.st)
		if lg == nil {
			return fmt.Errorf("%T has no position delivery", o.st)
		}
		insert = func(envs []core.Envelope) error {
			_, err := lg.InsertStream(ctx, o.db, envs)
			return err
		}
	}
	envs := make([]core.Envelope, 0, chunk)
	for i := range n {
		env, err := o.envelope(i)
		if err != nil {
			return err
		}
		envs = append(envs, env)
		if len(envs) == chunk || i == n-1 {
			if err := insert(envs); err != nil {
				return err
			}
			envs = envs[:0]
		}
	}
	return nil
}

func (o *ours) start(ctx context.Context, rec *recorder) error {
	o.rec = rec
	for _, ob := range o.obs {
		if err := ob.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (o *ours) stop(ctx context.Context) error {
	var first error
	for _, ob := range o.obs {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if err := ob.Close(c); err != nil && first == nil {
			first = err
		}
		cancel()
	}
	o.obs = nil
	return first
}

func (o *ours) teardown(ctx context.Context) {
	for _, ob := range o.obs {
		_ = ob.Close(context.WithoutCancel(ctx))
	}
	for _, p := range o.pools {
		_ = p.close()
	}
	if o.st != nil && o.db != nil {
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := testdb.DropTable(c, o.db, o.st); err != nil {
			fmt.Printf("    drop %s: %v\n", o.st.Table(), err)
		}
	}
	o.teardownBase(ctx)
}
