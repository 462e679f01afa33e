package outboxotel_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/contrib/outboxotel"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/store/sqlite"
)

// Tracing an outbox: the trace context of the request that writes an event
// travels in the event's headers, and its delivery continues that trace.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outboxotel-example")
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

	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	cfg := outboxotel.Config{TracerProvider: tp}

	delivered := make(chan struct{})
	reg := core.NewRegistry()
	_ = reg.RegisterFunc(core.AggregateName("Order"), core.EventName("OrderPlaced"),
		func(ctx context.Context, ev core.Event) error { close(delivered); return nil })
	ob, err := outbox.New(outbox.Config{
		DB:             db,
		Store:          outboxotel.WrapStore(store, cfg),
		Registry:       reg,
		ContextHeaders: outboxotel.ContextHeaders(cfg),
		Dispatch:       dispatch.Config{Interceptors: []core.Interceptor{outboxotel.Interceptor(cfg)}},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := ob.Start(ctx); err != nil {
		log.Fatal(err)
	}

	reqCtx, request := tp.Tracer("shop").Start(ctx, "POST /orders")
	err = ob.Do(reqCtx, func(ctx context.Context) error {
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"),
			AggregateType: core.AggregateName("Order"), AggregateID: "o-1", JSON: []byte(`{}`)})
		if err != nil {
			return err
		}
		_, err = ob.Writer().Write(ctx, env)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	request.End()
	<-delivered
	_ = ob.Close(ctx)

	inTrace := map[string]bool{}
	for _, s := range spans.Ended() {
		inTrace[s.Name()] = s.SpanContext().TraceID() == request.SpanContext().TraceID()
	}
	for _, name := range []string{"outbox insert", "deliver OrderPlaced", "outbox mark done batch"} {
		fmt.Printf("%-22s in the request's trace: %v\n", name, inTrace[name])
	}
	// Output:
	// outbox insert          in the request's trace: true
	// deliver OrderPlaced    in the request's trace: true
	// outbox mark done batch in the request's trace: false
}
