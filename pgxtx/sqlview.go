package pgxtx

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Tx.QueryContext and Tx.QueryRowContext must return *sql.Rows and *sql.Row,
// and only a *sql.DB makes those. sqlView is that *sql.DB, one per process,
// opened the first time it is needed: its driver connections hold nothing,
// and each runs its query on the pgx.Tx that the query's context carries.
// database/sql keeps one goroutine for it (its connection opener) for the
// life of the process.
var sqlView = sync.OnceValue(func() *sql.DB {
	db := sql.OpenDB(viewConnector{})
	db.SetMaxIdleConns(64) // connections are free: keep them
	return db
})

type viewTxKey struct{}

func withTx(ctx context.Context, tx pgx.Tx) context.Context {
	return context.WithValue(ctx, viewTxKey{}, tx)
}

var errNoViewTx = errors.New("pgxtx: query without a transaction")

type viewConnector struct{}

func (viewConnector) Connect(context.Context) (driver.Conn, error) { return viewConn{}, nil }
func (viewConnector) Driver() driver.Driver                        { return viewDriver{} }

type viewDriver struct{}

func (viewDriver) Open(string) (driver.Conn, error) { return viewConn{}, nil }

// viewConn runs queries on the pgx.Tx of their context. It takes the
// arguments as they were given (CheckNamedValue), so pgx encodes them as it
// would for tx.Query.
type viewConn struct{}

var (
	_ driver.QueryerContext    = viewConn{}
	_ driver.NamedValueChecker = viewConn{}
)

func (viewConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("pgxtx: prepared statements are not supported; use Tx.Pgx")
}
func (viewConn) Close() error              { return nil }
func (viewConn) Begin() (driver.Tx, error) { return nil, errors.New("pgxtx: already in a transaction") }

func (viewConn) CheckNamedValue(*driver.NamedValue) error { return nil }

func (viewConn) QueryContext(ctx context.Context, query string, named []driver.NamedValue) (driver.Rows, error) {
	tx, ok := ctx.Value(viewTxKey{}).(pgx.Tx)
	if !ok {
		return nil, errNoViewTx
	}
	args := make([]any, len(named))
	for i, nv := range named {
		if nv.Name != "" {
			return nil, fmt.Errorf("pgxtx: named argument %q: PostgreSQL takes $1, $2...", nv.Name)
		}
		args[i] = nv.Value
	}
	rows, err := tx.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return &viewRows{rows: rows}, nil
}

// viewRows hands a pgx query's rows to database/sql as driver values.
type viewRows struct {
	rows pgx.Rows
	cols []string
}

func (r *viewRows) Columns() []string {
	if r.cols == nil {
		fds := r.rows.FieldDescriptions()
		r.cols = make([]string, len(fds))
		for i, fd := range fds {
			r.cols[i] = fd.Name
		}
	}
	return r.cols
}

func (r *viewRows) Close() error {
	r.rows.Close()
	return r.rows.Err()
}

func (r *viewRows) Next(dest []driver.Value) error {
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return io.EOF
	}
	vals, err := r.rows.Values()
	if err != nil {
		return err
	}
	fds := r.rows.FieldDescriptions()
	for i, v := range vals {
		if oid := fds[i].DataTypeOID; oid == pgtype.JSONOID || oid == pgtype.JSONBOID {
			// pgx decodes JSON into Go values; database/sql wants the text.
			dest[i] = jsonText(r.rows.RawValues()[i], oid == pgtype.JSONBOID && fds[i].Format == pgx.BinaryFormatCode)
			continue
		}
		dv, err := driverValue(v)
		if err != nil {
			return fmt.Errorf("pgxtx: column %s: %w", fds[i].Name, err)
		}
		dest[i] = dv
	}
	return nil
}

// driverValue converts a value as pgx decodes it to one of database/sql's
// driver value types.
func driverValue(v any) (driver.Value, error) {
	switch v := v.(type) {
	case nil, int64, float64, bool, []byte, string, time.Time:
		return v, nil
	case int8:
		return int64(v), nil
	case int16:
		return int64(v), nil
	case int32:
		return int64(v), nil
	case int:
		return int64(v), nil
	case uint8:
		return int64(v), nil
	case uint16:
		return int64(v), nil
	case uint32:
		return int64(v), nil
	case uint64:
		if v > math.MaxInt64 {
			return nil, fmt.Errorf("%d overflows int64", v)
		}
		return int64(v), nil
	case float32:
		return float64(v), nil
	case [16]byte: // uuid
		return fmt.Sprintf("%x-%x-%x-%x-%x", v[0:4], v[4:6], v[6:8], v[8:10], v[10:16]), nil
	case driver.Valuer:
		dv, err := v.Value()
		if err != nil {
			return nil, err
		}
		if _, again := dv.(driver.Valuer); again {
			return nil, fmt.Errorf("%T has no database/sql form; query it with Tx.Pgx", v)
		}
		return driverValue(dv)
	case fmt.Stringer: // netip.Prefix, net.HardwareAddr...
		return v.String(), nil
	}
	return nil, fmt.Errorf("%T has no database/sql form; query it with Tx.Pgx", v)
}

// jsonText copies a json or jsonb column's raw value: its text, after the
// version byte that jsonb's binary format starts with. NULL stays nil.
func jsonText(raw []byte, binaryJSONB bool) driver.Value {
	if raw == nil {
		return nil
	}
	if binaryJSONB && len(raw) > 0 {
		raw = raw[1:]
	}
	return append([]byte(nil), raw...)
}
