// Package console is a web console for one outbox table: an http.Handler that
// shows the backlog by status and by event type, the age of the oldest
// pending event, the DEAD events with their last error (filtered by event
// type and aggregate type), one event in full, and what a purge would
// delete; with writes enabled it also replays one DEAD event, or all of
// those matching a filter after a confirmation page.
//
// On a store with ordered delivery (core.Ordering) the pages mark each
// ordered DEAD event: the DEAD head of a blocked key (its later events
// wait), which can be replayed or, after a confirmation page, skipped; or
// an event its key has moved past (skipped, or dead under DeadContinues),
// which replaying would deliver out of its key's order. "Replay all"
// replays the heads and the unordered events and leaves those out, and its
// confirmation page lists them.
//
// # Mounting and security
//
// The console has no authentication of its own: mount it behind the
// service's own (an admin-only route, a VPN, an authenticating proxy). Its
// links are relative, so it works under any prefix; strip the prefix and
// mount it with a trailing slash:
//
//	mux.Handle("/ops/outbox/", http.StripPrefix("/ops/outbox", c))
//
// By default it is read-only: every POST is refused with 403 and the pages
// show no buttons. Config.AllowWrites enables replays. Every state-changing
// request is a POST that must carry a CSRF token bound to a cookie of the
// browser (signed double-submit cookie) and pass net/http's
// CrossOriginProtection; GET requests never change anything. Payloads may
// carry personal data and stay hidden unless Config.ShowPayloads is set.
// The pages are server-rendered HTML without any script, served with a
// Content-Security-Policy that allows none.
//
// # Errors
//
// A bad filter, limit, duration or event id gets a 400 page naming the
// parameter; an unknown path a 404; a database error a 500 page with the
// error, which is also logged to Config.Logger.
package console

import (
	"cmp"
	"crypto/rand"
	"log/slog"
	"net/http"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dead"
	"github.com/outboxkit/outbox/internal/config"
	"github.com/outboxkit/outbox/outboxlog"
)

// Defaults of Config.
const (
	// DefaultPageSize is how many DEAD events a page lists when
	// Config.PageSize is zero.
	DefaultPageSize = 100
	// MaxPageSize is the largest page a request may ask for with ?limit=.
	MaxPageSize = 1000
	// DefaultPurgeRetention is the retention the purge dry run starts
	// with when Config.PurgeRetention is zero: the purger's default.
	DefaultPurgeRetention = 7 * 24 * time.Hour
)

// Config configures a Console. The zero value of every optional field means
// the default stated in its comment; New validates the rest.
type Config struct {
	// DB is the pool (*sql.DB, *sqlx.DB) every query runs on. Required.
	DB core.DBTX
	// Store is the store of the outbox table to show. It must offer
	// core.Inspector (found with core.StoreAs), as every store of this
	// module does. Required.
	Store core.Store
	// Title names the outbox in the page header and title, e.g. the
	// service's name. Default: the store's table name when it has a
	// Table() string method, else "outbox".
	Title string
	// AllowWrites enables replaying DEAD events, one or all matching a
	// filter, and skipping the DEAD heads of blocked ordered keys. Default
	// false: read-only, every POST is refused with 403.
	AllowWrites bool
	// ShowPayloads shows event payloads on the event page. Default false:
	// payloads may carry personal data, and the page says they are hidden.
	ShowPayloads bool
	// CSRFKey signs the CSRF tokens of the forms. Replicas behind one load
	// balancer must share it; at least 32 bytes. Default: a random key made
	// by New, so that tokens are valid for this process only.
	CSRFKey []byte
	// PageSize is how many DEAD events a page lists unless the request asks
	// for another number (?limit=, at most MaxPageSize). Default 100.
	PageSize int
	// PurgeRetention is the age the purge dry run starts with. Default 7
	// days, the purger's default.
	PurgeRetention time.Duration
	// ReplayBatchSize caps the events one statement of "replay all"
	// replays. Default dead.DefaultBatchSize (500).
	ReplayBatchSize int
	// Now returns the current time, for ages and purge cutoffs. Default
	// time.Now.
	Now func() time.Time
	// Logger receives the database errors the console shows as 500 pages. Nil:
	// outboxlog.Default(), which sends warnings and errors to slog.Default().
	// slog.New(slog.DiscardHandler) silences it; a zerolog.Logger zl is wired in
	// with slog.New(zerolog.NewSlogHandler(zl)).
	Logger *slog.Logger
}

// validate reports the first field of c that New cannot accept.
func (c Config) validate() error {
	v := config.Validator{Component: "console config"}
	v.Require("DB", c.DB != nil)
	v.Require("Store", c.Store != nil)
	config.NonNegative(&v, "PageSize", c.PageSize)
	v.Check(c.PageSize <= MaxPageSize, "PageSize is %d, more than %d", c.PageSize, MaxPageSize)
	config.NonNegative(&v, "PurgeRetention", c.PurgeRetention)
	config.NonNegative(&v, "ReplayBatchSize", c.ReplayBatchSize)
	v.Check(c.CSRFKey == nil || len(c.CSRFKey) >= 32, "CSRFKey has %d bytes, want at least 32", len(c.CSRFKey))
	if c.Store != nil {
		_, ok := core.StoreAs[core.Inspector](c.Store)
		v.Check(ok, "Store %T does not implement core.Inspector", c.Store)
	}
	return v.Err()
}

// withDefaults validates c and returns a copy with defaults applied.
func (c Config) withDefaults() (Config, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	if c.Title == "" {
		c.Title = "outbox"
		if t, ok := c.Store.(interface{ Table() string }); ok {
			c.Title = t.Table()
		}
	}
	c.PageSize = cmp.Or(c.PageSize, DefaultPageSize)
	c.PurgeRetention = cmp.Or(c.PurgeRetention, DefaultPurgeRetention)
	c.Now = config.Clock(c.Now)
	if c.CSRFKey == nil {
		c.CSRFKey = make([]byte, 32)
		_, _ = rand.Read(c.CSRFKey) // never fails (crypto/rand)
	}
	return c, nil
}

// Console is the web console of one outbox table. It is an http.Handler,
// safe for concurrent use.
type Console struct {
	cfg     Config
	insp    core.Inspector
	dead    *dead.Manager
	handler http.Handler
}

// New validates cfg and returns a Console. Bad configuration returns an error
// matching core.ErrInvalid.
func New(cfg Config) (*Console, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := dead.New(dead.Config{DB: cfg.DB, Store: cfg.Store, BatchSize: cfg.ReplayBatchSize, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	insp, _ := core.StoreAs[core.Inspector](cfg.Store)
	cfg.Logger = outboxlog.Or(cfg.Logger)
	c := &Console{cfg: cfg, insp: insp, dead: m}
	c.handler = c.routes()
	return c, nil
}

// ServeHTTP serves the console's pages.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.handler.ServeHTTP(w, r)
}

func (c *Console) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /dead", c.deadList)
	mux.HandleFunc("GET /event", c.event)
	mux.HandleFunc("GET /purge", c.purge)
	mux.HandleFunc("GET /replay-all", c.replayAllConfirm)
	mux.HandleFunc("POST /replay", c.write(c.replay))
	mux.HandleFunc("POST /replay-all", c.write(c.replayAll))
	mux.HandleFunc("GET /skip", c.skipConfirm)
	mux.HandleFunc("POST /skip", c.write(c.skip))
	mux.HandleFunc("GET /replay", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusMethodNotAllowed, "a replay is a POST: use the Replay button of the dead-event list")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "no such page: "+r.URL.Path)
	})
	// Browsers say where a request comes from (Sec-Fetch-Site, Origin): a
	// cross-origin POST is refused before the CSRF token is even looked at.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusForbidden, "cross-origin request refused")
	}))
	return securityHeaders(cop.Handler(mux))
}

// securityHeaders forbids scripts, framing and caching on every response:
// the pages are plain HTML and show operational data.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "+
			"frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// write wraps a state-changing handler: refused when the console is
// read-only or the CSRF token does not match the browser's cookie.
func (c *Console) write(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !c.cfg.AllowWrites {
			c.fail(w, r, http.StatusForbidden, "this console is read-only: writes are not enabled (Config.AllowWrites, outboxctl serve --allow-writes)")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			c.fail(w, r, http.StatusBadRequest, "bad form: "+err.Error())
			return
		}
		if !c.checkCSRF(r) {
			c.fail(w, r, http.StatusForbidden, "CSRF check failed: the form's token does not match this browser's cookie; reload the page and try again")
			return
		}
		h(w, r)
	}
}
