// Command multidb runs two outboxes side by side, one per database, on two
// SQLite files in a temporary directory; it needs no server and exits by
// itself.
//
//	go run ./samples/multidb
//
// orders.db and billing.db each have their own store, Writer, Dispatcher,
// Poller and listener Registry (one outbox.New each). It shows that:
//
//   - an event committed in one database is delivered by that database's
//     outbox only, to its own listeners, even when both register a listener
//     for the same event type;
//   - a listener of one outbox publishes into the other database through the
//     other outbox, in a transaction of that database: there is no
//     transaction spanning both, so the hand-over is at-least-once and the
//     receiving side deduplicates on the event id;
//   - a rollback in one database leaves the other untouched.
package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dispatch"
	"github.com/outboxkit/outbox/store/sqlite"
	"github.com/outboxkit/outbox/txctx"
)

const (
	Order   = core.AggregateName("Order")
	Invoice = core.AggregateName("Invoice")

	OrderPlaced      = core.EventName("OrderPlaced")
	InvoiceRequested = core.EventName("InvoiceRequested")
	Audit            = core.EventName("Audit") // both databases have a listener for it
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "multidb:", err)
		os.Exit(1)
	}
}

// database is one SQLite file with its own outbox.
type database struct {
	name   string
	outbox *outbox.Outbox
	store  *sqlite.Store
	reg    *core.Registry
	close  func() error
}

func open(ctx context.Context, dir, name, schema string) (*database, error) {
	db, err := sqlite.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	store, err := sqlite.New(sqlite.Config{})
	if err == nil {
		err = store.CreateSchema(ctx, db)
	}
	if err == nil {
		_, err = db.ExecContext(ctx, schema)
	}
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	d := &database{name: name, store: store, reg: core.NewRegistry(), close: db.Close}
	d.outbox, err = outbox.New(outbox.Config{DB: db, Store: store, Registry: d.reg,
		Dispatch: dispatch.Config{Retry: &core.ExponentialBackoff{Base: 50 * time.Millisecond}}})
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	return d, nil
}

// write writes one event in a transaction of d that also runs business.
func (d *database) write(ctx context.Context, agg core.AggregateType, typ core.EventType, aggID, payload string,
	business func(ctx context.Context, tx *txctx.Tx) error) error {
	return d.outbox.Do(ctx, func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		if business != nil {
			if err := business(ctx, tx); err != nil {
				return err
			}
		}
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: typ, AggregateType: agg, AggregateID: aggID, JSON: []byte(payload)})
		if err != nil {
			return err
		}
		_, err = d.outbox.Writer().Write(ctx, env)
		return err
	})
}

func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "outbox-multidb-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	orders, err := open(ctx, dir, "orders.db", `CREATE TABLE orders (id TEXT PRIMARY KEY, total_cents INTEGER NOT NULL)`)
	if err != nil {
		return err
	}
	defer orders.close()
	billing, err := open(ctx, dir, "billing.db",
		`CREATE TABLE invoices (id TEXT PRIMARY KEY, order_id TEXT NOT NULL, request_event_id TEXT NOT NULL UNIQUE)`)
	if err != nil {
		return err
	}
	defer billing.close()

	// Listeners report what they did on seen, in order.
	seen := make(chan string, 16)

	// orders.db: an order asks billing.db for an invoice, through billing's
	// outbox, in a billing transaction.
	err = orders.reg.RegisterFunc(Order, OrderPlaced, func(ctx context.Context, ev core.Event) error {
		seen <- fmt.Sprintf("[orders.db ] %s %s: requesting an invoice in billing.db", ev.Type(), ev.AggregateID())
		return billing.write(ctx, Invoice, InvoiceRequested, "inv-"+ev.AggregateID(),
			fmt.Sprintf(`{"order":%q,"request":%q}`, ev.AggregateID(), ev.ID()), nil)
	})
	if err != nil {
		return err
	}
	// billing.db: issue the invoice once per request, whatever redeliveries.
	err = billing.reg.RegisterFunc(Invoice, InvoiceRequested, func(ctx context.Context, ev core.Event) error {
		return billing.outbox.Do(ctx, func(ctx context.Context) error {
			tx, _ := txctx.From(ctx)
			if _, err := tx.ExecContext(ctx, `INSERT INTO invoices (id, order_id, request_event_id) VALUES (?, ?, ?)
				ON CONFLICT (request_event_id) DO NOTHING`, ev.AggregateID(), ev.AggregateID()[len("inv-"):], ev.ID()); err != nil {
				return err
			}
			seen <- fmt.Sprintf("[billing.db] %s %s: invoice issued", ev.Type(), ev.AggregateID())
			return nil
		})
	})
	if err != nil {
		return err
	}
	for _, d := range []*database{orders, billing} {
		err := d.reg.RegisterFunc(core.Global, Audit, func(ctx context.Context, ev core.Event) error {
			seen <- fmt.Sprintf("[%-10s] %s %s", d.name, ev.Type(), ev.Payload())
			return nil
		})
		if err != nil {
			return err
		}
		if err := d.outbox.Start(ctx); err != nil {
			return err
		}
		defer d.outbox.Close(context.WithoutCancel(ctx))
	}

	wait := func(n int) error {
		for range n {
			select {
			case s := <-seen:
				fmt.Fprintln(out, "  ", s)
			case <-ctx.Done():
				return fmt.Errorf("waiting for listeners: %w", ctx.Err())
			}
		}
		return nil
	}

	fmt.Fprintln(out, "1. order o-1 commits in orders.db; its listener hands over to billing.db")
	insertOrder := func(id string) func(ctx context.Context, tx *txctx.Tx) error {
		return func(ctx context.Context, tx *txctx.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO orders (id, total_cents) VALUES (?, 4200)`, id)
			return err
		}
	}
	if err := orders.write(ctx, Order, OrderPlaced, "o-1", `{"total_cents":4200}`, insertOrder("o-1")); err != nil {
		return err
	}
	if err := wait(2); err != nil {
		return err
	}

	fmt.Fprintln(out, "2. order o-2 rolls back in orders.db: no row, no event, nothing in billing.db")
	errDeclined := errors.New("card declined")
	err = orders.write(ctx, Order, OrderPlaced, "o-2", `{"total_cents":100}`, func(ctx context.Context, tx *txctx.Tx) error {
		if err := insertOrder("o-2")(ctx, tx); err != nil {
			return err
		}
		return errDeclined
	})
	if !errors.Is(err, errDeclined) {
		return fmt.Errorf("o-2: %v, want %v", err, errDeclined)
	}

	fmt.Fprintln(out, "3. both databases listen to Audit; each event reaches its own database's listener only")
	for _, d := range []*database{orders, billing} {
		if err := d.write(ctx, core.Global, Audit, "", fmt.Sprintf(`{"from":%q}`, d.name), nil); err != nil {
			return err
		}
		if err := wait(1); err != nil {
			return err
		}
	}
	select {
	case s := <-seen:
		return fmt.Errorf("unexpected delivery: %s", s)
	case <-time.After(200 * time.Millisecond):
	}

	for _, d := range []*database{orders, billing} {
		if err := d.outbox.Close(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "4. what each outbox table holds:")
	for _, d := range []*database{orders, billing} {
		if err := printTable(ctx, out, d); err != nil {
			return err
		}
	}
	var invoices int
	err = billing.outbox.Do(ctx, func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		return tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM invoices`).Scan(&invoices)
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "   billing.db invoices:", invoices)
	return nil
}

func printTable(ctx context.Context, out io.Writer, d *database) error {
	return d.outbox.Do(ctx, func(ctx context.Context) error {
		tx, _ := txctx.From(ctx)
		rows, err := tx.QueryContext(ctx, `SELECT aggregate_type, aggregate_id, event_type, status FROM `+d.store.Table()+
			` ORDER BY created_at, event_id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var agg, typ string
			var aggID sql.NullString
			var status core.Status
			if err := rows.Scan(&agg, &aggID, &typ, &status); err != nil {
				return err
			}
			fmt.Fprintf(out, "   %-10s %-10s %-8s %-16s %s\n", d.name, agg, aggID.String, typ, status)
		}
		return rows.Err()
	})
}
