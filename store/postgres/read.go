package postgres

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/store/internal/sqlstore"
)

// readRows is the position read of PositionSQL.Read: on a *sql.DB of pgx's
// driver it runs the query on the pgx connection behind the pool, with the
// generic plan (see onPgx), and decodes the rows from the bytes the server
// sent. database/sql would convert every column to a driver value and then
// copy it into its destination, and pgx's Scan looks up a plan per column;
// in a drain those steps cost the process more than the rest of the read.
// Any other db (a transaction, another driver), and columns that do not
// arrive in the forms fromRaw decodes, are read through database/sql.
func readRows(ctx context.Context, db core.DBTX, out []position.Row, query string, tok bool, args ...any) ([]position.Row, int64, bool, error) {
	var token int64
	handled, err := onPgx(ctx, db, query, args, func(rows pgx.Rows) (bool, error) {
		if !rawForm(rows.FieldDescriptions(), tok) {
			return false, nil // not a form of pgx v5's: read through database/sql
		}
		var r sqlstore.StreamRow
		for rows.Next() {
			if err := fromRaw(&r, rows.RawValues(), &token); err != nil {
				return true, err
			}
			out = append(out, r.Decode())
		}
		return true, rows.Err()
	})
	if !handled {
		return nil, 0, false, nil
	}
	return out, token, true, err
}

// readKeys is PositionSQL.ReadKeys, the read of positions and ids alone,
// as readRows runs reads.
func readKeys(ctx context.Context, db core.DBTX, query string, args ...any) ([]position.Row, int64, bool, error) {
	var out []position.Row
	var token int64
	handled, err := onPgx(ctx, db, query, args, func(rows pgx.Rows) (bool, error) {
		for rows.Next() {
			var r position.Row
			if err := rows.Scan(&r.Pos, &r.ID, &token); err != nil {
				return true, err
			}
			out = append(out, r)
		}
		return true, rows.Err()
	})
	if !handled {
		return nil, 0, false, nil
	}
	return out, token, true, err
}

// onPgx runs query on the pgx connection behind db, when db is a *sql.DB of
// pgx's driver, and hands its rows to read, which reports whether it took
// them; handled is false when db is not such a pool or read did not take
// the rows (the caller then reads through database/sql).
//
// The query runs with PostgreSQL's generic plan, in a read-only
// transaction sent with it in one round trip (BEGIN, SET LOCAL
// plan_cache_mode, the query, COMMIT). A prepared statement's first five
// executions on a connection are otherwise planned for their parameters
// from the table's statistics, and a table never analyzed (autovacuum off,
// or not run yet) has none: those plans then scan and sort the whole table,
// where the generic plan walks the stream index in order.
func onPgx(ctx context.Context, db core.DBTX, query string, args []any, read func(pgx.Rows) (bool, error)) (handled bool, err error) {
	pool, ok := db.(*sql.DB)
	if !ok {
		return false, nil
	}
	switch pool.Driver().(type) {
	case lazyDriver, *stdlib.Driver:
	default:
		return false, nil
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return true, err
	}
	defer conn.Close()
	err = conn.Raw(func(dc any) error {
		c, ok := pgxConn(dc)
		if !ok {
			return nil
		}
		handled, err = genericRead(ctx, c, query, args, read)
		return err
	})
	return handled, err
}

// genericRead runs query in a read-only transaction with plan_cache_mode
// force_generic_plan, all in one round trip, and hands its rows to read.
// Whatever fails, the connection leaves without a transaction open: a
// failed one is rolled back (if that fails too, database/sql discards the
// connection, whose driver finds it still in a transaction).
func genericRead(ctx context.Context, c *pgx.Conn, query string, args []any, read func(pgx.Rows) (bool, error)) (taken bool, err error) {
	b := &pgx.Batch{}
	b.Queue("BEGIN READ ONLY")
	b.Queue("SET LOCAL plan_cache_mode = force_generic_plan")
	b.Queue(query, args...)
	b.Queue("COMMIT")
	br := c.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			taken, err = true, cerr
		}
		if c.PgConn().TxStatus() != 'I' {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_, _ = c.Exec(rctx, "ROLLBACK")
		}
	}()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return true, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return true, err
	}
	taken, err = read(rows)
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	if err != nil {
		return true, err
	}
	if _, err := br.Exec(); err != nil {
		return true, err
	}
	return taken, nil
}

// The forms of the columns of a position read (readCols, then the token)
// that fromRaw decodes: the binary formats pgx v5 asks for.
const (
	rawText        = iota // text or varchar, in either format: the same bytes
	rawBytea              // bytea, binary format
	rawTimestamptz        // timestamptz, binary format
	rawInt8               // bigint, binary format
)

var rawCols = [...]int{rawText, rawText, rawText, rawText, rawText, rawBytea, rawText, rawTimestamptz, rawInt8, rawInt8}

// rawForm reports whether the columns of a read (fds; tok: with the token
// column) arrive in the forms fromRaw decodes.
func rawForm(fds []pgconn.FieldDescription, tok bool) bool {
	n := len(rawCols) - 1
	if tok {
		n++
	}
	if len(fds) != n {
		return false
	}
	for i, fd := range fds {
		var ok bool
		switch rawCols[i] {
		case rawText:
			ok = fd.DataTypeOID == pgtype.TextOID || fd.DataTypeOID == pgtype.VarcharOID
		case rawBytea:
			ok = fd.DataTypeOID == pgtype.ByteaOID && fd.Format == pgtype.BinaryFormatCode
		case rawTimestamptz:
			ok = fd.DataTypeOID == pgtype.TimestamptzOID && fd.Format == pgtype.BinaryFormatCode
		case rawInt8:
			ok = fd.DataTypeOID == pgtype.Int8OID && fd.Format == pgtype.BinaryFormatCode
		}
		if !ok {
			return false
		}
	}
	return true
}

// y2k is where PostgreSQL's binary timestamps count from, in Unix
// microseconds.
const y2k = 946_684_800_000_000

// fromRaw fills r, and *token when vals has the token column, from a row's
// values in the forms rawForm accepts. A NULL text is "", as database/sql
// scans it into a sql.NullString; created_at and pos are NOT NULL in the
// rows read, so a NULL there, like an infinite timestamp, is an error.
func fromRaw(r *sqlstore.StreamRow, vals [][]byte, token *int64) error {
	r.ID, r.EventType, r.AggregateType = string(vals[0]), string(vals[1]), string(vals[2])
	r.AggregateID, r.TenantID = string(vals[3]), string(vals[4])
	r.Payload = bytes.Clone(vals[5])
	r.Headers = string(vals[6])
	us, err := int8Value("created_at", vals[7])
	if err != nil {
		return err
	}
	if us == math.MaxInt64 || us == math.MinInt64 {
		return errors.New("created_at: infinite timestamp")
	}
	r.CreatedAt = time.UnixMicro(y2k + us)
	if r.Pos, err = int8Value("pos", vals[8]); err != nil {
		return err
	}
	if len(vals) > 9 {
		*token, err = int8Value("token", vals[9])
	}
	return err
}

// int8Value decodes a binary bigint, or a timestamp's microseconds.
func int8Value(name string, b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("%s: %d bytes, want 8 (binary format, not NULL)", name, len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}
