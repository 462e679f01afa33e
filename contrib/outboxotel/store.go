package outboxotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/outboxkit/outbox/core"
)

// WrapStore returns s with a span around each of its writes: "outbox
// insert" (a child of the writing context), "outbox claim" for claims that
// returned rows or failed, "outbox mark done", "outbox mark retry", "outbox
// mark dead", "outbox mark done batch", "outbox delete done batch",
// "outbox renew leases" and "outbox release". Everything else, and every
// capability of s the wrapper does not trace (core.Inspector, core.Locker,
// the schema methods...), is reached through Unwrap, so the library finds
// it as before.
//
// When s has all of core.BatchMarker, core.DoneDeleter and
// core.LeaseRenewer (the SQL stores of this repository do), the returned
// store has them too, traced; otherwise it has none of them itself and
// the library reaches those s has through Unwrap, untraced.
func WrapStore(s core.Store, cfg Config) core.Store {
	base := &tracedStore{Store: s, tracer: cfg.tracer()}
	bm, okB := core.StoreAs[core.BatchMarker](s)
	dd, okD := core.StoreAs[core.DoneDeleter](s)
	lr, okL := core.StoreAs[core.LeaseRenewer](s)
	if okB && okD && okL {
		return &tracedFullStore{tracedStore: base, batch: bm, deleter: dd, renewer: lr}
	}
	return base
}

type tracedStore struct {
	core.Store
	tracer trace.Tracer
}

// Unwrap returns the wrapped store (core.StoreUnwrapper).
func (s *tracedStore) Unwrap() core.Store { return s.Store }

// span starts an internal span for a store operation.
func (s *tracedStore) span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return s.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append(attrs, attribute.String("db.operation.name", name))...))
}

func (s *tracedStore) Insert(ctx context.Context, db core.DBTX, envs []core.Envelope, opts core.InsertOptions) (err error) {
	ctx, span := s.span(ctx, "outbox insert", attrEvents.Int(len(envs)))
	defer func() { endSpan(span, err) }()
	return s.Store.Insert(ctx, db, envs, opts)
}

func (s *tracedStore) Claim(ctx context.Context, db core.DBTX, p core.ClaimParams) ([]core.Event, []core.RowError, error) {
	start := time.Now()
	events, bad, err := s.Store.Claim(ctx, db, p)
	if len(events) == 0 && len(bad) == 0 && err == nil {
		return events, bad, err // an empty poll: no span
	}
	_, span := s.tracer.Start(ctx, "outbox claim", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start),
		trace.WithAttributes(attrOwner.String(p.Owner), attrEvents.Int(len(events)), attribute.Int("outbox.bad_rows", len(bad))))
	endSpan(span, err)
	return events, bad, err
}

func (s *tracedStore) Release(ctx context.Context, db core.DBTX, owner string, ids []string) (n int64, err error) {
	ctx, span := s.span(ctx, "outbox release", attrOwner.String(owner), attrEvents.Int(len(ids)))
	defer func() { span.SetAttributes(attrChanged.Int64(n)); endSpan(span, err) }()
	return s.Store.Release(ctx, db, owner, ids)
}

func (s *tracedStore) MarkDone(ctx context.Context, db core.DBTX, owner, id string, now time.Time) (ok bool, err error) {
	return s.mark(ctx, "outbox mark done", owner, id, func(ctx context.Context) (bool, error) {
		return s.Store.MarkDone(ctx, db, owner, id, now)
	})
}

func (s *tracedStore) MarkRetry(ctx context.Context, db core.DBTX, owner, id string, next time.Time, lastErr string) (bool, error) {
	return s.mark(ctx, "outbox mark retry", owner, id, func(ctx context.Context) (bool, error) {
		return s.Store.MarkRetry(ctx, db, owner, id, next, lastErr)
	})
}

func (s *tracedStore) MarkDead(ctx context.Context, db core.DBTX, owner, id string, now time.Time, lastErr string) (bool, error) {
	return s.mark(ctx, "outbox mark dead", owner, id, func(ctx context.Context) (bool, error) {
		return s.Store.MarkDead(ctx, db, owner, id, now, lastErr)
	})
}

// mark traces one fenced write-back; "outbox.fenced" says the row was no
// longer this owner's and nothing changed.
func (s *tracedStore) mark(ctx context.Context, name, owner, id string, fn func(context.Context) (bool, error)) (ok bool, err error) {
	ctx, span := s.span(ctx, name, attrOwner.String(owner), attribute.String("messaging.message.id", id))
	defer func() {
		if err == nil {
			span.SetAttributes(attribute.Bool("outbox.fenced", !ok))
		}
		endSpan(span, err)
	}()
	return fn(ctx)
}

// tracedFullStore is a tracedStore that also has the write capabilities of
// the SQL stores.
type tracedFullStore struct {
	*tracedStore
	batch   core.BatchMarker
	deleter core.DoneDeleter
	renewer core.LeaseRenewer
}

func (s *tracedFullStore) MarkDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (n int64, err error) {
	ctx, span := s.span(ctx, "outbox mark done batch", attrOwner.String(owner), attrEvents.Int(len(ids)))
	defer func() { span.SetAttributes(attrChanged.Int64(n)); endSpan(span, err) }()
	return s.batch.MarkDoneBatch(ctx, db, owner, ids, now)
}

func (s *tracedFullStore) DeleteDoneBatch(ctx context.Context, db core.DBTX, owner string, ids []string) (n int64, err error) {
	ctx, span := s.span(ctx, "outbox delete done batch", attrOwner.String(owner), attrEvents.Int(len(ids)))
	defer func() { span.SetAttributes(attrChanged.Int64(n)); endSpan(span, err) }()
	return s.deleter.DeleteDoneBatch(ctx, db, owner, ids)
}

func (s *tracedFullStore) RenewLeases(ctx context.Context, db core.DBTX, owner string, ids []string, now time.Time) (lost []string, err error) {
	ctx, span := s.span(ctx, "outbox renew leases", attrOwner.String(owner), attrEvents.Int(len(ids)))
	defer func() { span.SetAttributes(attribute.Int("outbox.leases_lost", len(lost))); endSpan(span, err) }()
	return s.renewer.RenewLeases(ctx, db, owner, ids, now)
}

var (
	_ core.StoreUnwrapper = (*tracedStore)(nil)
	_ core.BatchMarker    = (*tracedFullStore)(nil)
	_ core.DoneDeleter    = (*tracedFullStore)(nil)
	_ core.LeaseRenewer   = (*tracedFullStore)(nil)
)
