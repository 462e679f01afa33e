package dispatch_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/store/sqlite"
	"github.com/outboxkit/outbox/txctx"
)

// Example wires the whole pipeline on SQLite: an event written in a business
// transaction reaches its listener through the hot path right after COMMIT,
// and a poller stands by for retries and overflow.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	st, err := sqlite.New(sqlite.Config{})
	if err != nil {
		panic(err)
	}
	if err := st.CreateSchema(ctx, db); err != nil {
		panic(err)
	}

	delivered := make(chan string, 1)
	reg := core.NewRegistry()
	err = reg.RegisterFunc(core.AggregateName("Order"), core.EventName("OrderPlaced"),
		func(ctx context.Context, ev core.Event) error {
			delivered <- string(ev.Payload())
			return nil
		})
	if err != nil {
		panic(err)
	}

	d, err := dispatch.New(dispatch.Config{Store: st, DB: db, Registry: reg})
	if err != nil {
		panic(err)
	}
	p, err := poller.New(poller.Config{Store: st, DB: db, Handler: d}) // Owner: d.Owner()
	if err != nil {
		panic(err)
	}
	w, err := core.NewWriter(core.WriterConfig{Store: st, Hook: d.WriterHook()})
	if err != nil {
		panic(err)
	}
	txm, err := txctx.New(db, txctx.Config{})
	if err != nil {
		panic(err)
	}
	if err := d.Start(ctx); err != nil {
		panic(err)
	}
	if err := p.Start(ctx); err != nil {
		panic(err)
	}

	env, err := core.NewEnvelope(core.EnvelopeSpec{
		Type:          core.EventName("OrderPlaced"),
		AggregateType: core.AggregateName("Order"),
		AggregateID:   "o-1",
		JSON:          []byte(`{"order":"o-1"}`),
	})
	if err != nil {
		panic(err)
	}
	err = txm.Do(ctx, func(ctx context.Context) error {
		// ... the business change, on the transaction txctx.From(ctx) ...
		_, err := w.Write(ctx, env)
		return err
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("delivered:", <-delivered)

	// Stop the poller first, so that it stops feeding the dispatcher.
	_ = p.Close(ctx)
	_ = d.Close(ctx)
	ev, err := st.Get(ctx, db, env.ID())
	if err != nil {
		panic(err)
	}
	fmt.Println("status:", ev.Status)
	// Output:
	// delivered: {"order":"o-1"}
	// status: DONE
}
