package outbox_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/txctx"
)

// TestWriteStatements: a business transaction that writes one event sends
// the database one statement for it, in the claim path and in position
// delivery alike (the STREAM INSERT takes its position and returns it in
// that statement): BEGIN, the business statement, the event's INSERT,
// COMMIT. Counted at the driver, on the transaction's connection.
func TestWriteStatements(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		dsn := map[string]string{"postgres": os.Getenv("OUTBOX_POSTGRES_DSN"), "mysql": os.Getenv("OUTBOX_MYSQL_DSN")}[tg.Name]
		if dsn == "" {
			t.Skipf("%s: the driver's DSN is not known to this test", tg.Name)
		}
		if tg.Name == "mysql" {
			dsn += "&interpolateParams=true" // as mysql.Open sets it
		}
		for _, delivery := range []outbox.Delivery{outbox.DeliveryClaim, outbox.DeliveryPosition} {
			t.Run(delivery.String(), func(t *testing.T) {
				rec := &stmtRecorder{}
				db := sql.OpenDB(&countingConnector{drv: tg.DB.Driver(), dsn: dsn, rec: rec})
				t.Cleanup(func() { _ = db.Close() })
				s := &seen{}
				ob := start(t, fast(outbox.Config{DB: db, Store: tg.Store, Registry: registry(t, s), Delivery: delivery}))
				env := envelope(t, "statements-"+delivery.String())
				const marker = "SELECT 'business statement'"
				err := ob.Do(context.Background(), func(ctx context.Context) error {
					tx, _ := txctx.From(ctx)
					if _, err := tx.ExecContext(ctx, marker); err != nil {
						return err
					}
					_, err := ob.Writer().Write(ctx, env)
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				waitSeen(t, s, env.ID())
				got := rec.txWith(marker)
				if len(got) != 2 || !strings.HasPrefix(got[1], "INSERT INTO") {
					t.Fatalf("the business transaction sent %d statements after BEGIN, want the business statement and one INSERT:\n%s",
						len(got), strings.Join(got, "\n"))
				}
			})
		}
	})
}

func envelope(t *testing.T, id string) core.Envelope {
	t.Helper()
	env, err := core.NewEnvelope(core.EnvelopeSpec{ID: id, Type: orderPlaced, AggregateType: orders, JSON: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// stmtRecorder keeps the statements of every committed transaction.
type stmtRecorder struct {
	mu  sync.Mutex
	txs [][]string
}

// txWith returns the statements of the committed transaction that ran
// marker.
func (r *stmtRecorder) txWith(marker string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, tx := range r.txs {
		for _, q := range tx {
			if q == marker {
				return tx
			}
		}
	}
	return nil
}

// countingConnector opens connections of drv that record the statements
// each transaction runs.
type countingConnector struct {
	drv driver.Driver
	dsn string
	rec *stmtRecorder
}

func (c *countingConnector) Connect(context.Context) (driver.Conn, error) {
	conn, err := c.drv.Open(c.dsn)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, rec: c.rec}, nil
}

func (c *countingConnector) Driver() driver.Driver { return c.drv }

// countingConn forwards to the driver's connection what database/sql asks
// of it, noting the statements run between BEGIN and COMMIT.
type countingConn struct {
	driver.Conn
	rec  *stmtRecorder
	inTx []string // statements of the open transaction; nil outside one
	open bool
}

var (
	_ driver.ExecerContext      = (*countingConn)(nil)
	_ driver.QueryerContext     = (*countingConn)(nil)
	_ driver.ConnBeginTx        = (*countingConn)(nil)
	_ driver.NamedValueChecker  = (*countingConn)(nil)
	_ driver.SessionResetter    = (*countingConn)(nil)
	_ driver.ConnPrepareContext = (*countingConn)(nil)
)

func (c *countingConn) note(q string) {
	if c.open {
		c.inTx = append(c.inTx, q)
	}
}

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.note(q)
	return e.ExecContext(ctx, q, args)
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	qc, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.note(q)
	return qc.QueryContext(ctx, q, args)
}

func (c *countingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	c.note("PREPARE " + q)
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		return p.PrepareContext(ctx, q)
	}
	return c.Conn.Prepare(q)
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	b, ok := c.Conn.(driver.ConnBeginTx)
	if !ok {
		return nil, errors.New("driver without BeginTx")
	}
	tx, err := b.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.open, c.inTx = true, []string{}
	return &countingTx{Tx: tx, c: c}, nil
}

func (c *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

type countingTx struct {
	driver.Tx
	c *countingConn
}

func (t *countingTx) Commit() error {
	err := t.Tx.Commit()
	if err == nil {
		t.c.rec.mu.Lock()
		t.c.rec.txs = append(t.c.rec.txs, t.c.inTx)
		t.c.rec.mu.Unlock()
	}
	t.c.open, t.c.inTx = false, nil
	return err
}

func (t *countingTx) Rollback() error {
	t.c.open, t.c.inTx = false, nil
	return t.Tx.Rollback()
}
