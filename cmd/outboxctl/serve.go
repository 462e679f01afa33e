package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox/console"
)

// serveHelp is the usage of "serve", shown by help and -h.
const serveHelp = `outboxctl serve [--addr HOST:PORT] [--allow-writes] [--show-payloads]

Serves the web console of the table (package console): the backlog by status
and event type, the oldest pending age, the dead events with their last
error, a purge dry run and, with --allow-writes, replays. It runs until
interrupted (Ctrl-C, SIGTERM) or --timeout.

The console has NO AUTHENTICATION of its own: anyone who can reach the
address can read the table and, with --allow-writes, replay events. It binds
to 127.0.0.1 by default; reach it through an SSH tunnel, or mount the
console package behind your service's authentication instead of exposing
this server.`

// serve runs the web console until ctx ends.
func (a *app) serve(ctx context.Context, args []string) error {
	fs := a.command("serve")
	addr := fs.String("addr", "127.0.0.1:8080", "listen on this `host:port` (port 0 picks a free one)")
	writes := fs.Bool("allow-writes", false, "enable replaying dead events (default: read-only)")
	payloads := fs.Bool("show-payloads", false, "show event payloads (default: hidden)")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		return usagef("serve: --addr %q: %v (want host:port, e.g. 127.0.0.1:8080)", *addr, err)
	}
	ctx, s, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer s.Close()
	c, err := console.New(console.Config{DB: s.db, Store: s.store, AllowWrites: *writes, ShowPayloads: *payloads,
		Now: a.now, Logger: slog.New(zerolog.NewSlogHandler(zerolog.New(a.stderr).With().Timestamp().Logger()))})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		fmt.Fprintf(a.stderr, "outboxctl: warning: %s is reachable from other machines and the console has no authentication\n", ln.Addr())
	}
	mode := "read-only"
	if *writes {
		mode = "writes enabled"
	}
	fmt.Fprintf(a.stderr, "outboxctl: console of table %s (%s) on http://%s/\n", s.store.Table(), mode, ln.Addr())

	srv := &http.Server{Handler: c, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Requests in flight get a few seconds to finish; the context that
	// ended the server is already cancelled.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	if serr := <-done; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("serve: shut down: %w", err)
	}
	fmt.Fprintln(a.stderr, "outboxctl: console stopped")
	return nil
}
