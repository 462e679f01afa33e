package prometheus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/poller"
	"github.com/outboxkit/outbox/txctx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newExporter(t *testing.T, reg prom.Registerer, labels prom.Labels) *Exporter {
	t.Helper()
	e, err := New(Config{Registerer: reg, ConstLabels: labels})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func TestExporterCounters(t *testing.T) {
	reg := prom.NewPedanticRegistry()
	e := newExporter(t, reg, nil)
	e.HotEnqueued()
	e.HotEnqueued()
	e.HotDropped()
	e.ColdEnqueued()
	e.DispatchSuccess()
	e.DispatchSuccess()
	e.DispatchFailure()
	e.DispatchDead()
	e.StoreError()
	e.QueueDepths(7, 3)
	e.OldestLag(1500 * time.Millisecond)

	want := `
# HELP outbox_cold_enqueued_total Events the poller claimed and handed to the cold queue.
# TYPE outbox_cold_enqueued_total counter
outbox_cold_enqueued_total 1
# HELP outbox_dispatch_total Delivery outcomes: success (DONE), failure (RETRY scheduled), dead (DEAD).
# TYPE outbox_dispatch_total counter
outbox_dispatch_total{result="dead"} 1
outbox_dispatch_total{result="failure"} 1
outbox_dispatch_total{result="success"} 2
# HELP outbox_hot_dropped_total Events the full hot queue refused; the poller delivers them later.
# TYPE outbox_hot_dropped_total counter
outbox_hot_dropped_total 1
# HELP outbox_hot_enqueued_total Events handed to the hot queue right after their transaction committed.
# TYPE outbox_hot_enqueued_total counter
outbox_hot_enqueued_total 2
# HELP outbox_oldest_lag_seconds Age (now - created_at) of the event a worker took from a queue most recently.
# TYPE outbox_oldest_lag_seconds gauge
outbox_oldest_lag_seconds 1.5
# HELP outbox_queue_depth Events waiting in the dispatcher's in-memory queues.
# TYPE outbox_queue_depth gauge
outbox_queue_depth{queue="cold"} 3
outbox_queue_depth{queue="hot"} 7
# HELP outbox_store_errors_total Failed store operations: claims, outcome write-backs, lease releases.
# TYPE outbox_store_errors_total counter
outbox_store_errors_total 1
`
	counters := []string{"outbox_cold_enqueued_total", "outbox_dispatch_total", "outbox_hot_dropped_total",
		"outbox_hot_enqueued_total", "outbox_oldest_lag_seconds", "outbox_queue_depth", "outbox_store_errors_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), counters...); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

func TestExporterZeroSeriesExistBeforeFirstEvent(t *testing.T) {
	reg := prom.NewRegistry()
	newExporter(t, reg, nil)
	// Alerts on rate(...) need the series to exist at 0.
	n, err := testutil.GatherAndCount(reg, "outbox_dispatch_total", "outbox_queue_depth")
	if err != nil || n != 5 {
		t.Errorf("series before any event = %d, %v; want 5", n, err)
	}
}

func TestSeveralOutboxesOnOneRegistry(t *testing.T) {
	reg := prom.NewRegistry()
	orders := newExporter(t, reg, prom.Labels{"outbox": "orders"})
	billing := newExporter(t, reg, prom.Labels{"outbox": "billing"})
	orders.DispatchSuccess()
	billing.DispatchDead()
	billing.DispatchDead()
	if got := testutil.ToFloat64(orders.success); got != 1 {
		t.Errorf("orders success = %v", got)
	}
	if got := testutil.ToFloat64(billing.dead); got != 2 {
		t.Errorf("billing dead = %v", got)
	}

	// The same const labels twice is a conflict, and the failed exporter
	// leaves nothing behind.
	before, _ := testutil.GatherAndCount(reg)
	_, err := New(Config{Registerer: reg, ConstLabels: prom.Labels{"outbox": "orders"}})
	var are prom.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("duplicate exporter: %v, want prometheus.AlreadyRegisteredError", err)
	}
	after, _ := testutil.GatherAndCount(reg)
	if before != after {
		t.Errorf("series %d -> %d after a failed New", before, after)
	}
}

func TestExporterNaming(t *testing.T) {
	reg := prom.NewRegistry()
	e, err := New(Config{Registerer: reg, Namespace: "shop", Subsystem: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	e.HotEnqueued()
	if n, err := testutil.GatherAndCount(reg, "shop_orders_hot_enqueued_total"); err != nil || n != 1 {
		t.Errorf("shop_orders_hot_enqueued_total: %d, %v", n, err)
	}
	if _, err := New(Config{}); !errors.Is(err, core.ErrInvalid) {
		t.Errorf("nil Registerer: %v, want core.ErrInvalid", err)
	}
}

// outcomes counts dispatch outcomes on top of the exporter, so the test can
// wait for them instead of sleeping.
type outcomes struct {
	*Exporter
	n    atomic.Int64
	want int64
	done chan struct{}
}

func (o *outcomes) count() {
	if o.n.Add(1) == o.want {
		close(o.done)
	}
}
func (o *outcomes) DispatchSuccess() { o.Exporter.DispatchSuccess(); o.count() }
func (o *outcomes) DispatchFailure() { o.Exporter.DispatchFailure(); o.count() }
func (o *outcomes) DispatchDead()    { o.Exporter.DispatchDead(); o.count() }

type name string

func (n name) Name() string { return string(n) }

// TestEndToEndScrape runs writer, dispatcher and poller on SQLite with the
// exporter and a sampler, then scrapes /metrics over HTTP.
func TestEndToEndScrape(t *testing.T) {
	tg := testdb.SQLite(t)
	ctx := testCtx(t)
	reg := prom.NewPedanticRegistry()
	labels := prom.Labels{"outbox": "orders"}
	const placed = 5
	// placed successes, the flaky event's failure then success, the
	// poisoned and the unroutable events' deaths.
	exp := &outcomes{Exporter: newExporter(t, reg, labels), want: placed + 4, done: make(chan struct{})}

	routes := core.NewRegistry()
	order := name("Order")
	var flakyCalls atomic.Int64
	must(t, routes.RegisterFunc(order, name("Placed"), func(context.Context, core.Event) error { return nil }))
	must(t, routes.RegisterFunc(order, name("Flaky"), func(context.Context, core.Event) error {
		if flakyCalls.Add(1) == 1 {
			return errors.New("downstream timeout")
		}
		return nil
	}))
	must(t, routes.RegisterFunc(order, name("Poisoned"), func(context.Context, core.Event) error {
		return core.Permanent(errors.New("cannot parse"))
	}))

	d, err := dispatch.New(dispatch.Config{Store: tg.Store, DB: tg.DB, Registry: routes, Metrics: exp,
		Retry: &core.ExponentialBackoff{Base: 5 * time.Millisecond, Max: 10 * time.Millisecond}})
	must(t, err)
	p, err := poller.New(poller.Config{Store: tg.Store, DB: tg.DB, Handler: d, Metrics: exp})
	must(t, err)
	writer, err := core.NewWriter(core.WriterConfig{Store: tg.Store, Hook: d.WriterHook()})
	must(t, err)
	txm, err := txctx.New(tg.DB, txctx.Config{})
	must(t, err)
	must(t, d.Start(ctx))
	must(t, p.Start(ctx))

	var ids []string
	write := func(eventType string) {
		t.Helper()
		must(t, txm.Do(ctx, func(ctx context.Context) error {
			env, err := core.NewEnvelope(core.EnvelopeSpec{Type: name(eventType), AggregateType: order,
				AggregateID: "order-" + eventType, TenantID: "tenant-42", JSON: []byte(`{}`)})
			if err != nil {
				return err
			}
			id, err := writer.Write(ctx, env)
			ids = append(ids, id)
			return err
		}))
	}
	for range placed {
		write("Placed")
	}
	write("Flaky")
	write("Poisoned")
	write("Unroutable")

	select {
	case <-exp.done:
	case <-ctx.Done():
		t.Fatalf("only %d of %d outcomes", exp.n.Load(), exp.want)
	}
	must(t, p.Close(ctx))
	must(t, d.Close(ctx))

	sampler, err := NewSampler(SamplerConfig{Metrics: Config{Registerer: reg, ConstLabels: labels},
		DB: tg.DB, Store: inspector(t, tg)})
	must(t, err)
	must(t, sampler.SampleOnce(ctx))

	e := exp.Exporter
	hot, cold := testutil.ToFloat64(e.hotEnqueued), testutil.ToFloat64(e.coldEnqueued)
	success, failure, dead := testutil.ToFloat64(e.success), testutil.ToFloat64(e.failure), testutil.ToFloat64(e.dead)
	if hot != placed+3 || cold != 1 || success != placed+1 || failure != 1 || dead != 2 {
		t.Errorf("hot %v cold %v success %v failure %v dead %v; want %d 1 %d 1 2",
			hot, cold, success, failure, dead, placed+3, placed+1)
	}
	if hot+cold != success+failure+dead {
		t.Errorf("enqueued %v != outcomes %v", hot+cold, success+failure+dead)
	}
	if got := testutil.ToFloat64(e.storeErrors) + testutil.ToFloat64(e.hotDropped); got != 0 {
		t.Errorf("store errors + hot drops = %v, want 0", got)
	}

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	must(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	must(t, err)
	text := string(body)
	for _, line := range []string{
		`outbox_dispatch_total{outbox="orders",result="success"} 6`,
		`outbox_dispatch_total{outbox="orders",result="failure"} 1`,
		`outbox_dispatch_total{outbox="orders",result="dead"} 2`,
		`outbox_hot_enqueued_total{outbox="orders"} 8`,
		`outbox_cold_enqueued_total{outbox="orders"} 1`,
		`outbox_pending_events{outbox="orders"} 0`,
		`outbox_retrying_events{outbox="orders"} 0`,
		`outbox_dead_events{outbox="orders"} 2`,
		`outbox_oldest_pending_age_seconds{outbox="orders"} 0`,
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("scrape lacks %q", line)
		}
	}
	for _, id := range ids {
		if strings.Contains(text, id) {
			t.Errorf("scrape carries event id %s", id)
		}
	}
	if strings.Contains(text, "tenant-42") || strings.Contains(text, "order-Placed") {
		t.Error("scrape carries a tenant or aggregate id")
	}

	// Only the bounded labels exist.
	families, err := reg.Gather()
	must(t, err)
	allowed := map[string]bool{"outbox": true, "result": true, "queue": true}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !allowed[l.GetName()] {
					t.Errorf("%s has label %s=%s", f.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ExampleNew() {
	reg := prom.NewRegistry()
	exp, err := New(Config{Registerer: reg, ConstLabels: prom.Labels{"outbox": "orders"}})
	if err != nil {
		panic(err)
	}
	// Pass exp as dispatch.Config.Metrics and poller.Config.Metrics.
	exp.DispatchSuccess()
	fmt.Println(testutil.ToFloat64(exp.success))
	// Output: 1
}

// TestExporterHistograms: each duration lands in its histogram, in seconds,
// the delivery latency under the queue it names.
func TestExporterHistograms(t *testing.T) {
	reg := prom.NewPedanticRegistry()
	e := newExporter(t, reg, nil)
	e.DeliveryLatency("hot", 2*time.Millisecond)
	e.DeliveryLatency("hot", 4*time.Millisecond)
	e.DeliveryLatency("cold", 3*time.Second)
	e.ListenerDuration(time.Millisecond)
	e.ClaimDuration(5 * time.Millisecond)
	e.WriteBackDuration(6 * time.Millisecond)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ name, queue string }
	got := map[key][2]float64{} // count, sum
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				k := key{name: f.GetName()}
				for _, l := range m.GetLabel() {
					if l.GetName() == "queue" {
						k.queue = l.GetValue()
					}
				}
				got[k] = [2]float64{float64(h.GetSampleCount()), h.GetSampleSum()}
			}
		}
	}
	for k, want := range map[key][2]float64{
		{"outbox_delivery_latency_seconds", "hot"}:  {2, 0.006},
		{"outbox_delivery_latency_seconds", "cold"}: {1, 3},
		{"outbox_listener_duration_seconds", ""}:    {1, 0.001},
		{"outbox_claim_duration_seconds", ""}:       {1, 0.005},
		{"outbox_writeback_duration_seconds", ""}:   {1, 0.006},
	} {
		g := got[k]
		if g[0] != want[0] || math.Abs(g[1]-want[1]) > 1e-9 {
			t.Errorf("%s{queue=%q}: count %v sum %v, want %v and %v", k.name, k.queue, g[0], g[1], want[0], want[1])
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}
