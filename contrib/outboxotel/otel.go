package outboxotel

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox/core"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/outboxkit/outbox/contrib/outboxotel"

// Config says where spans and metrics go and how the trace context is
// carried in event headers. Its zero value is ready to use.
type Config struct {
	// TracerProvider creates the spans. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider creates the instruments of NewMetrics. Default:
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator writes the trace context into event headers and reads it
	// back. Default: W3C Trace Context (traceparent, tracestate), whatever
	// the global propagator is: the headers outlive the process that wrote
	// them, so their format should not change with a process's settings.
	Propagator propagation.TextMapPropagator
}

func (c Config) tracer() trace.Tracer {
	tp := c.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(ScopeName)
}

func (c Config) propagator() propagation.TextMapPropagator {
	if c.Propagator == nil {
		return propagation.TraceContext{}
	}
	return c.Propagator
}

// ContextHeaders returns a function for outbox.Config.ContextHeaders (or
// core.WriterConfig.ContextHeaders) that stores the trace context of the
// writing context in each event's headers. A context without a span adds
// nothing.
func ContextHeaders(cfg Config) func(ctx context.Context) map[string]string {
	prop := cfg.propagator()
	return func(ctx context.Context) map[string]string {
		if !trace.SpanContextFromContext(ctx).IsValid() {
			return nil
		}
		h := propagation.MapCarrier{}
		prop.Inject(ctx, h)
		return h
	}
}

// Attribute keys the spans carry besides the OpenTelemetry messaging ones.
const (
	attrEventType     = attribute.Key("outbox.event_type")
	attrAggregateType = attribute.Key("outbox.aggregate_type")
	attrAggregateID   = attribute.Key("outbox.aggregate_id")
	attrTenantID      = attribute.Key("outbox.tenant_id")
	attrAttempt       = attribute.Key("outbox.attempt")
	attrOwner         = attribute.Key("outbox.owner")
	attrEvents        = attribute.Key("outbox.events")
	attrChanged       = attribute.Key("outbox.rows_changed")
)

// Interceptor returns a core.Interceptor for dispatch.Config.Interceptors
// that runs each listener call in a consumer span named "deliver <event
// type>", whose parent is the trace context stored with the event (see
// ContextHeaders); an event without one starts a trace of its own. A failed
// delivery sets the span's status to error and records the error.
func Interceptor(cfg Config) core.Interceptor {
	return &interceptor{tracer: cfg.tracer(), prop: cfg.propagator()}
}

type interceptor struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
}

type spanKey struct{}

func (ic *interceptor) Before(ctx context.Context, ev core.Event) (context.Context, error) {
	parent := ic.prop.Extract(ctx, propagation.MapCarrier(ev.Headers()))
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "outbox"),
		attribute.String("messaging.operation.type", "process"),
		attribute.String("messaging.operation.name", "deliver"),
		attribute.String("messaging.message.id", ev.ID()),
		attribute.String("messaging.destination.name", ev.AggregateType()),
		attrEventType.String(ev.Type()),
		attrAggregateType.String(ev.AggregateType()),
		attrAttempt.Int(ev.Attempts + 1),
	}
	if id := ev.AggregateID(); id != "" {
		attrs = append(attrs, attrAggregateID.String(id))
	}
	if id := ev.TenantID(); id != "" {
		attrs = append(attrs, attrTenantID.String(id))
	}
	ctx, span := ic.tracer.Start(parent, "deliver "+ev.Type(),
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	// Kept under a key of our own: an interceptor after this one may start
	// a span of its own in ctx, and After must end ours.
	return context.WithValue(ctx, spanKey{}, span), nil
}

func (ic *interceptor) After(ctx context.Context, _ core.Event, outcome error) error {
	span, ok := ctx.Value(spanKey{}).(trace.Span)
	if !ok {
		return errors.New("outboxotel: no span in the context After received")
	}
	endSpan(span, outcome)
	return nil
}

// endSpan records err, if any, and ends span.
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
