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

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/store/internal/sqlstore"
)

// readRows is the position read of PositionSQL.Read: on a *sql.DB of pgx's
// driver it runs the query on the pgx connection behind the pool and
// decodes the rows from the bytes the server sent. database/sql would
// convert every column to a driver value and then copy it into its
// destination, and pgx's Scan looks up a plan per column; in a drain those
// steps cost the process more than the rest of the read. Any other db (a
// transaction, another driver), and columns that do not arrive in the forms
// fromRaw decodes, are read through database/sql.
func readRows(ctx context.Context, db core.DBTX, out []position.Row, query string, tok bool, args ...any) ([]position.Row, int64, bool, error) {
	pool, ok := db.(*sql.DB)
	if !ok {
		return nil, 0, false, nil
	}
	if _, ok := pool.Driver().(*stdlib.Driver); !ok {
		return nil, 0, false, nil
	}
	conn, err := pool.Conn(ctx)
	if err != nil {
		return nil, 0, true, err
	}
	defer conn.Close()
	var token int64
	handled := false
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return nil
		}
		rows, err := sc.Conn().Query(ctx, query, args...)
		if err != nil {
			handled = true
			return err
		}
		defer rows.Close()
		if !rawForm(rows.FieldDescriptions(), tok) {
			return nil // not a form of pgx v5's: read through database/sql
		}
		handled = true
		var r sqlstore.StreamRow
		for rows.Next() {
			if err := fromRaw(&r, rows.RawValues(), &token); err != nil {
				return err
			}
			out = append(out, r.Decode())
		}
		return rows.Err()
	})
	if err == nil && !handled {
		return nil, 0, false, nil
	}
	return out, token, true, err
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
