package outboxotel_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/contrib/outboxotel"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/poller"
)

const (
	order       = core.AggregateName("Order")
	orderPlaced = core.EventName("OrderPlaced")
)

// start runs an outbox on tg, traced into rec, with listener l.
func start(t *testing.T, tg testdb.Target, cfg outboxotel.Config, l core.ListenerFunc) *outbox.Outbox {
	t.Helper()
	reg := core.NewRegistry()
	if err := reg.Register(order, orderPlaced, l); err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(outbox.Config{
		DB:             tg.DB,
		Store:          outboxotel.WrapStore(tg.Store, cfg),
		Registry:       reg,
		ContextHeaders: outboxotel.ContextHeaders(cfg),
		Dispatch: dispatch.Config{
			Interceptors: []core.Interceptor{outboxotel.Interceptor(cfg)},
			Retry:        core.ExponentialBackoff{Base: time.Millisecond, Max: time.Millisecond},
		},
		Poller: poller.Config{Interval: 20 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	if err := ob.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ob.Close(context.Background()) })
	return ob
}

func envelope(t *testing.T) core.Envelope {
	t.Helper()
	env, err := core.NewEnvelope(core.EnvelopeSpec{Type: orderPlaced, AggregateType: order, AggregateID: "o-1", JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func spansNamed(spans tracetest.SpanStubs, name string) tracetest.SpanStubs {
	var out tracetest.SpanStubs
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// TestWriteAndDeliveriesAreOneTrace writes an event inside a request span;
// the listener fails once, then succeeds. The insert span and both delivery
// spans belong to the request's trace, the deliveries as children of the
// request span, the failed one with its error.
func TestWriteAndDeliveriesAreOneTrace(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		cfg := outboxotel.Config{TracerProvider: tp}
		delivered := make(chan struct{})
		calls := 0
		ob := start(t, tg, cfg, func(ctx context.Context, ev core.Event) error {
			calls++
			if calls == 1 {
				return errors.New("downstream unavailable")
			}
			close(delivered)
			return nil
		})

		ctx, request := tp.Tracer("test").Start(context.Background(), "POST /orders")
		if err := ob.Do(ctx, func(ctx context.Context) error {
			_, err := ob.Writer().Write(ctx, envelope(t))
			return err
		}); err != nil {
			t.Fatal(err)
		}
		request.End()
		select {
		case <-delivered:
		case <-time.After(30 * time.Second):
			t.Fatal("event not delivered")
		}
		// The delivery span ends in the interceptor's After, which runs
		// after the listener returned; closing the outbox waits for it.
		if err := ob.Close(context.Background()); err != nil {
			t.Fatal(err)
		}

		spans := exp.GetSpans()
		traceID := request.SpanContext().TraceID()
		inserts := spansNamed(spans, "outbox insert")
		if len(inserts) != 1 || inserts[0].SpanContext.TraceID() != traceID || inserts[0].Parent.SpanID() != request.SpanContext().SpanID() {
			t.Fatalf("insert spans %+v: want one, a child of the request", inserts)
		}
		deliveries := spansNamed(spans, "deliver OrderPlaced")
		if len(deliveries) != 2 {
			t.Fatalf("%d delivery spans, want 2 (a failure, then the success); spans: %v", len(deliveries), names(spans))
		}
		for i, d := range deliveries {
			if d.SpanContext.TraceID() != traceID || d.Parent.SpanID() != request.SpanContext().SpanID() {
				t.Errorf("delivery %d is not a child of the request span: trace %s parent %s", i, d.SpanContext.TraceID(), d.Parent.SpanID())
			}
		}
		if deliveries[0].Status.Code != codes.Error || deliveries[0].Status.Description != "downstream unavailable" {
			t.Errorf("first delivery status %+v, want the listener's error", deliveries[0].Status)
		}
		if deliveries[1].Status.Code == codes.Error {
			t.Errorf("second delivery status %+v, want no error", deliveries[1].Status)
		}
		if got := spansNamed(spans, "outbox mark retry"); len(got) != 1 {
			t.Errorf("%d mark retry spans, want 1", len(got))
		}
		if len(spansNamed(spans, "outbox mark done batch"))+len(spansNamed(spans, "outbox mark done")) == 0 {
			t.Errorf("no DONE write-back span; spans: %v", names(spans))
		}
	})
}

// TestClaimSpans: an event written without the hot path is claimed by the
// poller; that claim has a span, and the empty polls before and after it
// have none.
func TestClaimSpans(t *testing.T) {
	tg := testdb.SQLite(t)
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	delivered := make(chan struct{}, 1)
	ob := start(t, tg, outboxotel.Config{TracerProvider: tp}, func(context.Context, core.Event) error {
		delivered <- struct{}{}
		return nil
	})
	// A plain *sql.Tx has no after-commit callbacks: the poller delivers.
	ctx := context.Background()
	tx, err := tg.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ob.Writer().WriteTx(ctx, tx, envelope(t)); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-delivered:
	case <-time.After(30 * time.Second):
		t.Fatal("event not delivered")
	}
	if err := ob.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	claims := spansNamed(exp.GetSpans(), "outbox claim")
	if len(claims) != 1 {
		t.Fatalf("%d claim spans, want exactly 1 (the poll that found the event): %v", len(claims), names(exp.GetSpans()))
	}
	if claims[0].EndTime.Before(claims[0].StartTime) || claims[0].EndTime.Equal(claims[0].StartTime) {
		t.Errorf("claim span has no duration: %v to %v", claims[0].StartTime, claims[0].EndTime)
	}
}

// TestWrapStoreKeepsCapabilities: the library still finds every capability
// of a wrapped SQL store.
func TestWrapStoreKeepsCapabilities(t *testing.T) {
	tg := testdb.SQLite(t)
	s := outboxotel.WrapStore(tg.Store, outboxotel.Config{})
	if _, ok := core.StoreAs[core.BatchMarker](s); !ok {
		t.Error("BatchMarker lost")
	}
	if _, ok := s.(core.BatchMarker); !ok {
		t.Error("the wrapper does not trace MarkDoneBatch itself")
	}
	if _, ok := core.StoreAs[core.Inspector](s); !ok {
		t.Error("Inspector lost")
	}
	if _, ok := core.StoreAs[core.LeaseRenewer](s); !ok {
		t.Error("LeaseRenewer lost")
	}
}

func TestContextHeadersWithoutSpan(t *testing.T) {
	if h := outboxotel.ContextHeaders(outboxotel.Config{})(context.Background()); h != nil {
		t.Errorf("headers %v from a context without a span", h)
	}
}

// TestMetrics delivers one event and reads the instruments back.
func TestMetrics(t *testing.T) {
	tg := testdb.SQLite(t)
	reader := sdkmetric.NewManualReader()
	m, err := outboxotel.NewMetrics(outboxotel.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	delivered := make(chan struct{}, 1)
	reg := core.NewRegistry()
	if err := reg.RegisterFunc(order, orderPlaced, func(context.Context, core.Event) error { delivered <- struct{}{}; return nil }); err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(outbox.Config{DB: tg.DB, Store: tg.Store, Registry: reg, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ob.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ob.Do(ctx, func(ctx context.Context) error { _, err := ob.Writer().Write(ctx, envelope(t)); return err }); err != nil {
		t.Fatal(err)
	}
	<-delivered
	if err := ob.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if s, ok := md.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range s.DataPoints {
					key := md.Name
					if v, ok := dp.Attributes.Value("outbox.result"); ok {
						key += "/" + v.AsString()
					}
					sums[key] += dp.Value
				}
			}
		}
	}
	if sums["outbox.hot.enqueued"] != 1 || sums["outbox.dispatch/success"] != 1 {
		t.Errorf("counters %v: want outbox.hot.enqueued 1 and outbox.dispatch/success 1", sums)
	}
	counts := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, md := range sm.Metrics {
			if h, ok := md.Data.(metricdata.Histogram[float64]); ok {
				for _, dp := range h.DataPoints {
					key := md.Name
					if v, ok := dp.Attributes.Value("outbox.queue"); ok {
						key += "/" + v.AsString()
					}
					counts[key] += dp.Count
				}
			}
		}
	}
	if counts["outbox.delivery.latency/hot"] != 1 || counts["outbox.listener.duration"] != 1 || counts["outbox.writeback.duration"] == 0 {
		t.Errorf("histograms %v: want one hot delivery latency, one listener duration, a write-back", counts)
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	slices.Sort(out)
	return out
}
