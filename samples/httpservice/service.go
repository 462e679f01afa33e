package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/txctx"
)

// Event and aggregate types: Go string enums.
type orderEvent string

func (e orderEvent) Name() string { return string(e) }

const (
	Order          = core.AggregateName("Order")
	OrderPlaced    = orderEvent("OrderPlaced")
	OrderCancelled = orderEvent("OrderCancelled")
)

// orderPayload is the JSON payload of both events.
type orderPayload struct {
	OrderID    string `json:"order_id"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
}

// service holds the HTTP handlers and the listeners.
type service struct {
	db     *sql.DB
	outbox *outbox.Outbox
	log    zerolog.Logger
	orders string // quoted table names
	emails string
}

func newService(db *sql.DB, table string, log zerolog.Logger) (*service, error) {
	last := table[strings.LastIndex(table, ".")+1:]
	if len(last)+len("_orders") > 63 {
		return nil, fmt.Errorf("table name %q is too long to derive the service's table names from", table)
	}
	return &service{db: db, log: log, orders: quoteIdent(table + "_orders"), emails: quoteIdent(table + "_emails")}, nil
}

func (s *service) createSchema(ctx context.Context) error {
	for _, ddl := range []string{
		`CREATE TABLE IF NOT EXISTS ` + s.orders + ` (
			id          text PRIMARY KEY,
			customer    text NOT NULL,
			total_cents bigint NOT NULL,
			status      text NOT NULL,
			created_at  timestamptz NOT NULL DEFAULT now())`,
		// One row per email sent; event_id makes a redelivery a no-op.
		`CREATE TABLE IF NOT EXISTS ` + s.emails + ` (
			event_id  text PRIMARY KEY,
			order_id  text NOT NULL,
			recipient text NOT NULL,
			subject   text NOT NULL,
			sent_at   timestamptz NOT NULL DEFAULT now())`,
	} {
		if _, err := s.db.ExecContext(ctx, ddl); err != nil {
			return err
		}
	}
	return nil
}

func (s *service) routes(metrics *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", s.placeOrder)
	mux.HandleFunc("GET /orders/{id}", s.getOrder)
	mux.HandleFunc("POST /orders/{id}/cancel", s.cancelOrder)
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(metrics, promhttp.HandlerOpts{}))
	return mux
}

// placeOrderRequest is the body of POST /orders.
type placeOrderRequest struct {
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
}

func (r placeOrderRequest) validate() error {
	switch {
	case r.Customer == "" || !strings.Contains(r.Customer, "@") || len(r.Customer) > 254:
		return errors.New("customer must be an email address")
	case r.TotalCents <= 0:
		return errors.New("total_cents must be positive")
	}
	return nil
}

// orderView is what GET /orders/{id} returns.
type orderView struct {
	ID         string    `json:"id"`
	Customer   string    `json:"customer"`
	TotalCents int64     `json:"total_cents"`
	Status     string    `json:"status"`
	CreatedAt  time.Time `json:"created_at"`
	Emails     []string  `json:"emails"` // subjects of the emails sent, oldest first
}

func (s *service) placeOrder(w http.ResponseWriter, r *http.Request) {
	var req placeOrderRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON: "+err.Error())
		return
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "invalid JSON: more than one value")
		return
	}
	if err := req.validate(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}

	id := ulid.Make().String()
	var eventID string
	// The order row and its event commit together, or neither does.
	err := s.outbox.Do(r.Context(), func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+s.orders+` (id, customer, total_cents, status) VALUES ($1, $2, $3, 'placed')`,
			id, req.Customer, req.TotalCents); err != nil {
			return err
		}
		var err error
		eventID, err = s.publish(ctx, OrderPlaced, orderPayload{OrderID: id, Customer: req.Customer, TotalCents: req.TotalCents})
		return err
	})
	if err != nil {
		s.internalError(w, "place order", err)
		return
	}
	w.Header().Set("Location", "/orders/"+id)
	writeJSON(w, http.StatusCreated, map[string]string{"id": id, "event_id": eventID})
}

func (s *service) cancelOrder(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	errNotFound, errConflict := errors.New("no such order"), errors.New("order is already cancelled")
	err := s.outbox.Do(r.Context(), func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		var p orderPayload
		var status string
		err := tx.QueryRowContext(ctx, `SELECT id, customer, total_cents, status FROM `+s.orders+` WHERE id = $1 FOR UPDATE`, id).
			Scan(&p.OrderID, &p.Customer, &p.TotalCents, &status)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return errNotFound
		case err != nil:
			return err
		case status == "cancelled":
			return errConflict
		}
		if _, err := tx.ExecContext(ctx, `UPDATE `+s.orders+` SET status = 'cancelled' WHERE id = $1`, id); err != nil {
			return err
		}
		_, err = s.publish(ctx, OrderCancelled, p)
		return err
	})
	switch {
	case errors.Is(err, errNotFound):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, errConflict):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		s.internalError(w, "cancel order", err)
	default:
		writeJSON(w, http.StatusOK, map[string]string{"id": id, "status": "cancelled"})
	}
}

// publish writes one Order event in the transaction ctx carries.
func (s *service) publish(ctx context.Context, typ orderEvent, p orderPayload) (string, error) {
	payload, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	env, err := core.NewEnvelope(core.EnvelopeSpec{Type: typ, AggregateType: Order, AggregateID: p.OrderID, JSON: payload})
	if err != nil {
		return "", err
	}
	return s.outbox.Writer().Write(ctx, env)
}

func (s *service) getOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var o orderView
	err := s.db.QueryRowContext(ctx, `SELECT id, customer, total_cents, status, created_at FROM `+s.orders+` WHERE id = $1`,
		r.PathValue("id")).Scan(&o.ID, &o.Customer, &o.TotalCents, &o.Status, &o.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		writeError(w, http.StatusNotFound, "no such order")
		return
	}
	if err != nil {
		s.internalError(w, "get order", err)
		return
	}
	rows, err := s.db.QueryContext(ctx, `SELECT subject FROM `+s.emails+` WHERE order_id = $1 ORDER BY sent_at, event_id`, o.ID)
	if err != nil {
		s.internalError(w, "get order", err)
		return
	}
	defer rows.Close()
	o.Emails = []string{}
	for rows.Next() {
		var subject string
		if err := rows.Scan(&subject); err != nil {
			s.internalError(w, "get order", err)
			return
		}
		o.Emails = append(o.Emails, subject)
	}
	if err := rows.Err(); err != nil {
		s.internalError(w, "get order", err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

func (s *service) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.db.PingContext(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "database unreachable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// sendConfirmation is the listener of (Order, OrderPlaced).
func (s *service) sendConfirmation(ctx context.Context, ev core.Event) error {
	return s.sendEmail(ctx, ev, "Your order %s is confirmed")
}

// sendCancellation is the listener of (Order, OrderCancelled).
func (s *service) sendCancellation(ctx context.Context, ev core.Event) error {
	return s.sendEmail(ctx, ev, "Your order %s is cancelled")
}

// sendEmail simulates sending an email by recording it. The event id is the
// email's key, so a redelivered event sends nothing twice.
func (s *service) sendEmail(ctx context.Context, ev core.Event, subject string) error {
	var p orderPayload
	if err := json.Unmarshal(ev.Payload(), &p); err != nil {
		return core.Permanent(fmt.Errorf("decode payload: %w", err)) // no retry fixes this
	}
	if strings.HasSuffix(p.Customer, "@flaky.example") && ev.Attempts == 0 {
		return errors.New("smtp: 451 temporary failure, try again later")
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO `+s.emails+` (event_id, order_id, recipient, subject) VALUES ($1, $2, $3, $4)
		ON CONFLICT (event_id) DO NOTHING`, ev.ID(), p.OrderID, p.Customer, fmt.Sprintf(subject, p.OrderID))
	if err != nil {
		return fmt.Errorf("record email: %w", err)
	}
	s.log.Info().Str("event_id", ev.ID()).Str("event_type", ev.Type()).Str("order_id", p.OrderID).
		Int("attempt", ev.Attempts+1).Msg("email sent")
	return nil
}

func (s *service) internalError(w http.ResponseWriter, what string, err error) {
	s.log.Error().Err(err).Msg(what)
	writeError(w, http.StatusInternalServerError, "internal error")
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
