package main

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// wm is watermill-sql as its documentation uses it for an outbox: a
// Publisher made on the business transaction publishes into the topic's
// table, and one Subscriber of a consumer group reads it, acking each
// message. The default schema and offsets adapters of the dialect.
type wm struct {
	base
	pgx    bool          // writers and subscriber on pgx pools (PostgreSQL)
	pool   *pgxpool.Pool // the writers' pool on pgx
	topic  string
	poll   time.Duration
	schema wsql.SchemaAdapter
	offs   wsql.OffsetsAdapter
	sub    *wsql.Subscriber
	cdb    interface{ Close() error }
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (w *wm) setup(ctx context.Context, srv *server, writers int) error {
	if err := w.setupBase(ctx, srv, writers); err != nil {
		return err
	}
	w.topic = uniqueName("wm")
	if srv.pg() {
		w.schema, w.offs = wsql.DefaultPostgreSQLSchema{}, wsql.DefaultPostgreSQLOffsetsAdapter{}
		w.extra = append(w.extra, `"watermill_`+w.topic+`"`, `"watermill_offsets_`+w.topic+`"`)
	} else {
		w.schema, w.offs = wsql.DefaultMySQLSchema{}, wsql.DefaultMySQLOffsetsAdapter{}
		w.extra = append(w.extra, "`watermill_"+w.topic+"`", "`watermill_offsets_"+w.topic+"`")
	}
	// The subscriber creates the topic's tables: the publishers on
	// transactions must not (DDL would commit the transaction).
	if w.pgx {
		var err error
		if w.pool, err = srv.openPgx(ctx, writers); err != nil {
			return err
		}
	}
	sub, err := w.newSubscriber(wsql.BeginnerFromStdSQL(w.db))
	if err != nil {
		return err
	}
	if err := sub.SubscribeInitialize(w.topic); err != nil {
		return fmt.Errorf("watermill schema: %w", err)
	}
	return sub.Close()
}

func (w *wm) newSubscriber(db wsql.Beginner) (*wsql.Subscriber, error) {
	return wsql.NewSubscriber(db, wsql.SubscriberConfig{
		ConsumerGroup:    "bench",
		PollInterval:     w.poll,
		SchemaAdapter:    w.schema,
		OffsetsAdapter:   w.offs,
		InitializeSchema: true,
	}, watermill.NopLogger{})
}

func (w *wm) msg(i int) *message.Message { return message.NewMessage(eventID(i), payload(i)) }

func (w *wm) write(ctx context.Context, i int, rec *recorder) error {
	if w.pgx {
		return w.inPgxTx(ctx, w.pool, i, rec, func(tx pgx.Tx) error {
			pub, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: w.schema}, watermill.NopLogger{})
			if err != nil {
				return err
			}
			return pub.Publish(w.topic, w.msg(i))
		})
	}
	return w.inTx(ctx, i, rec, func(tx *sql.Tx) error {
		pub, err := wsql.NewPublisher(wsql.TxFromStdSQL(tx), wsql.PublisherConfig{SchemaAdapter: w.schema}, watermill.NopLogger{})
		if err != nil {
			return err
		}
		return pub.Publish(w.topic, w.msg(i))
	})
}

func (w *wm) fill(ctx context.Context, n int) error {
	pub, err := wsql.NewPublisher(wsql.BeginnerFromStdSQL(w.db), wsql.PublisherConfig{SchemaAdapter: w.schema}, watermill.NopLogger{})
	if err != nil {
		return err
	}
	defer pub.Close()
	const chunk = 500
	msgs := make([]*message.Message, 0, chunk)
	for i := range n {
		msgs = append(msgs, w.msg(i))
		if len(msgs) == chunk || i == n-1 {
			if err := pub.Publish(w.topic, msgs...); err != nil {
				return err
			}
			msgs = msgs[:0]
		}
	}
	return nil
}

func (w *wm) start(ctx context.Context, rec *recorder) error {
	var beginner wsql.Beginner
	if w.pgx {
		pool, err := w.srv.openPgx(ctx, 4)
		if err != nil {
			return err
		}
		w.cdb, beginner = closerFunc(func() error { pool.Close(); return nil }), wsql.BeginnerFromPgx(pool)
	} else {
		db, err := w.srv.open(4)
		if err != nil {
			return err
		}
		w.cdb, beginner = db, wsql.BeginnerFromStdSQL(db)
	}
	var err error
	if w.sub, err = w.newSubscriber(beginner); err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	w.cancel = cancel
	msgs, err := w.sub.Subscribe(sctx, w.topic)
	if err != nil {
		return err
	}
	w.wg.Go(func() {
		for m := range msgs {
			n, _ := eventNo(m.UUID)
			rec.deliver(n)
			m.Ack()
		}
	})
	return nil
}

func (w *wm) stop(context.Context) error {
	if w.sub == nil {
		return nil
	}
	w.cancel()
	err := w.sub.Close()
	w.wg.Wait()
	w.sub = nil
	_ = w.cdb.Close()
	return err
}

func (w *wm) teardown(ctx context.Context) {
	if w.pool != nil {
		w.pool.Close()
	}
	w.teardownBase(ctx)
}

// closerFunc is a Close method of a function.
type closerFunc func() error

func (f closerFunc) Close() error { return f() }
