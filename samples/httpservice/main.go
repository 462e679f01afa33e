// Command httpservice is a small REST service on PostgreSQL that publishes
// its events through the outbox.
//
//	go run ./samples/httpservice                     # local server, port 8080
//	go run ./samples/httpservice -dsn 'postgres://user@db:5432/app' -addr :9000
//
//	curl -i -X POST localhost:8080/orders -d '{"customer":"ada@example.com","total_cents":1250}'
//	curl -s localhost:8080/orders/ID
//	curl -s -X POST localhost:8080/orders/ID/cancel
//	curl -s localhost:8080/metrics | grep ^outbox_
//
// POST /orders inserts an order row and writes an OrderPlaced event in the
// same transaction; POST /orders/{id}/cancel does the same with
// OrderCancelled. One listener per (aggregate type, event type) "sends" an
// email by recording it in a table, deduplicating on the event id, since
// delivery is at-least-once; customers at flaky.example make the mail server
// fail once, so the retry path shows in the logs and the metrics.
// GET /orders/{id} shows the order with the emails sent about it.
//
// main wires everything with outbox.New: dispatcher, poller and purger, the
// Prometheus exporter (GET /metrics) and a sampler of the table's backlog.
// GET /healthz pings the database. SIGINT or SIGTERM shuts down gracefully:
// the HTTP server first, so that requests in flight still write and deliver
// their events, then the outbox.
//
// Flags: -dsn (default the local server), -addr (default 127.0.0.1:8080) and
// -table, the outbox table (default outbox_event); the service keeps its own
// rows in <table>_orders and <table>_emails, so that runs with different
// -table values never share data.
//
// With -nats URL the service publishes its events to NATS JetStream instead
// of sending the e-mails itself: each event becomes one message, stored in
// the stream <TABLE>_EVENTS (created if missing) on the subject
// <TABLE>_EVENTS.Order.<event type>, with the event id as Nats-Msg-Id; the
// event is DONE once JetStream acknowledged it. The e-mails are then another
// service's job (samples/natsinbox shows a consumer):
//
//	go run ./samples/httpservice -nats nats://127.0.0.1:4222
//
// The sample is a module of its own, so that the root module needs no NATS
// client.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	outboxprom "github.com/outboxkit/outbox/metrics/prometheus"
	"github.com/outboxkit/outbox/purge"
	"github.com/outboxkit/outbox/store/postgres"
)

const defaultDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// shutdownTimeout bounds the graceful shutdown: the HTTP server's, then the
// outbox's drain.
const shutdownTimeout = 15 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpservice:", err)
		os.Exit(1)
	}
}

// run serves until ctx is cancelled, then shuts down gracefully. Logs go to
// stdout as JSON lines; the first one that says "listening" carries the
// address.
func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("httpservice", flag.ContinueOnError)
	dsn := fs.String("dsn", defaultDSN, "PostgreSQL `DSN`")
	addr := fs.String("addr", "127.0.0.1:8080", "listen `address`")
	table := fs.String("table", "outbox_event", "outbox table `name`; the service's tables are NAME_orders and NAME_emails")
	natsURL := fs.String("nats", "", "NATS `URL` (JetStream enabled): publish the events to the stream TABLE_EVENTS instead of sending the e-mails")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := zerolog.New(stdout).Level(zerolog.InfoLevel).With().Timestamp().Logger()
	// The outbox logs through log/slog; zerolog's slog handler hands its
	// records to this zerolog logger.
	outboxLog := slog.New(zerolog.NewSlogHandler(log))

	db, err := postgres.Open(*dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	store, err := postgres.New(postgres.Config{Table: *table})
	if err != nil {
		return err
	}
	svc, err := newService(db, *table, log)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = store.CreateSchema(sctx, db)
	if err == nil {
		err = svc.createSchema(sctx)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("create tables: %w", err)
	}

	// Listeners: one per (aggregate type, event type); with -nats, the
	// JetStream publisher for both.
	placed, cancelled := core.Listener(core.ListenerFunc(svc.sendConfirmation)), core.Listener(core.ListenerFunc(svc.sendCancellation))
	if *natsURL != "" {
		pub, stream, closeNATS, err := natsPublisher(ctx, *natsURL, *table)
		if err != nil {
			return err
		}
		defer closeNATS() // after the outbox has stopped: run's other defers come first
		placed, cancelled = pub, pub
		log.Info().Str("stream", stream).Msg("publishing to NATS JetStream")
	}
	reg := core.NewRegistry()
	if err := reg.Register(Order, OrderPlaced, placed); err != nil {
		return err
	}
	if err := reg.Register(Order, OrderCancelled, cancelled); err != nil {
		return err
	}

	// Metrics on a registry of our own: /metrics shows the outbox and Go
	// runtime series.
	metrics := prometheus.NewRegistry()
	metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := outboxprom.New(outboxprom.Config{Registerer: metrics})
	if err != nil {
		return err
	}
	sampler, err := outboxprom.NewSampler(outboxprom.SamplerConfig{
		Metrics: outboxprom.Config{Registerer: metrics},
		DB:      db, Store: store, Interval: 10 * time.Second, Logger: outboxLog,
	})
	if err != nil {
		return err
	}

	ob, err := outbox.New(outbox.Config{
		DB: db, Store: store, Registry: reg,
		Dispatch: dispatch.Config{ListenerTimeout: 10 * time.Second},
		Purge:    &purge.Config{}, // DONE and DEAD rows older than 7 days, hourly
		Metrics:  exporter,
		Logger:   outboxLog,
	})
	if err != nil {
		return err
	}
	svc.outbox = ob

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	// The outbox and the sampler outlive ctx: they stop after the HTTP
	// server, below.
	bg := context.WithoutCancel(ctx)
	if err := ob.Start(bg); err != nil {
		ln.Close()
		return err
	}
	if err := sampler.Start(bg); err != nil {
		ln.Close()
		return errors.Join(err, ob.Close(bg))
	}

	srv := &http.Server{Handler: svc.routes(metrics), ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info().Str("addr", ln.Addr().String()).Str("table", store.Table()).Msg("listening")

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}
	log.Info().Msg("shutting down")
	shCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	err = srv.Shutdown(shCtx)
	if serveErr == nil {
		serveErr = <-served
	}
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	err = errors.Join(serveErr, err, ob.Close(shCtx), sampler.Close(shCtx))
	if err != nil {
		return err
	}
	log.Info().Msg("stopped")
	return nil
}

// quoteIdent quotes a possibly schema-qualified name for PostgreSQL.
func quoteIdent(name string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
	}
	return strings.Join(parts, ".")
}
