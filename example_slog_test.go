package outbox_test

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/sqlite"
)

// The outbox logs to a *slog.Logger: here an event whose listener fails
// for good is marked DEAD, and the error record says which and why. Without
// Logger, warnings and errors go to slog.Default().
func ExampleConfig_slog() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-slog")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlite.New(sqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateSchema(ctx, db); err != nil {
		log.Fatal(err)
	}

	reg := core.NewRegistry()
	err = reg.RegisterFunc(core.AggregateName("Order"), core.EventName("OrderPlaced"),
		func(ctx context.Context, ev core.Event) error {
			return core.Permanent(errors.New("card declined")) // DEAD at once
		})
	if err != nil {
		log.Fatal(err)
	}

	// Warnings and errors as text on stdout; the time is left out so that
	// the output below stays the same from run to run.
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))
	ob, err := outbox.New(outbox.Config{DB: db, Store: store, Registry: reg, Logger: logger})
	if err != nil {
		log.Fatal(err)
	}
	if err := ob.Start(ctx); err != nil {
		log.Fatal(err)
	}

	err = ob.Do(ctx, func(ctx context.Context) error {
		env, err := core.NewEnvelope(core.EnvelopeSpec{
			ID:            "01JEXAMPLE0000000000000001",
			Type:          core.EventName("OrderPlaced"),
			AggregateType: core.AggregateName("Order"),
			JSON:          []byte(`{"total_cents":1250}`),
		})
		if err != nil {
			return err
		}
		_, err = ob.Writer().Write(ctx, env)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	// Close drains the delivery in flight, and with it its log record.
	if err := ob.Close(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// level=ERROR msg="outbox event failed; marked DEAD" component=outbox.dispatcher event_id=01JEXAMPLE0000000000000001 event_type=OrderPlaced aggregate_type=Order attempts_before=0 error="permanent: card declined" attempts=1
}
