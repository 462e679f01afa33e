// Package outboxotel traces and measures an outbox with OpenTelemetry.
//
// It lives in a module of its own (github.com/outboxkit/outbox/contrib/outboxotel),
// so that a service that does not use OpenTelemetry never downloads it.
//
// Four pieces, each optional:
//
//   - ContextHeaders, given to outbox.Config.ContextHeaders (or
//     core.WriterConfig.ContextHeaders), stores the trace context of the
//     writing request in each event's headers (W3C traceparent and
//     tracestate by default).
//   - Interceptor, added to dispatch.Config.Interceptors, runs every
//     listener call in a consumer span whose parent is the trace context
//     stored with the event. The write and every delivery attempt of one
//     event are therefore one trace, however long after the write (retries,
//     a replay of a DEAD event) and on whichever instance the delivery runs.
//     A parent rather than a link: an outbox event has exactly one producer,
//     and a trace that shows "the request that wrote the event, then each
//     attempt to deliver it" is what someone debugging a lost or late event
//     wants to open. A delivery that failed records its error on the span.
//   - WrapStore gives the store spans of its own: the insert (a child of the
//     writing request), claims that returned rows or failed, and the outcome
//     write-backs (DONE, RETRY, DEAD, in batches or not), lease renewals
//     and releases. A poll that found nothing records no span, so an idle
//     poller does not fill the trace backend.
//   - NewMetrics is a core.Metrics on an OpenTelemetry meter: the same
//     counters and gauges as the Prometheus exporter
//     (github.com/outboxkit/outbox/metrics/prometheus), for services that
//     export metrics through OpenTelemetry instead.
//
// Wiring with outbox.New:
//
//	cfg := outboxotel.Config{} // global tracer and meter providers, W3C propagation
//	ob, err := outbox.New(outbox.Config{
//		DB:             db,
//		Store:          outboxotel.WrapStore(store, cfg),
//		Registry:       reg,
//		ContextHeaders: outboxotel.ContextHeaders(cfg),
//		Dispatch:       dispatch.Config{Interceptors: []core.Interceptor{outboxotel.Interceptor(cfg)}},
//	})
package outboxotel
