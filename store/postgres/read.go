package postgres

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/store/internal/sqlstore"
)

// readRows is the position read of PositionSQL.Read: on a *sql.DB of pgx's
// driver it runs the query on the pgx connection behind the pool and scans
// the rows into their fields. database/sql would convert every column to a
// driver value and then copy it into its destination; in a drain those
// conversions cost the process more than the rest of the read. Any other db
// (a transaction, another driver) is read through database/sql.
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
	pgxConn := false
	err = conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return nil
		}
		pgxConn = true
		rows, err := sc.Conn().Query(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		var r sqlstore.StreamRow
		var aggregateID, tenantID, headers pgtype.Text
		dest := []any{&r.ID, &r.EventType, &r.AggregateType, &aggregateID, &tenantID, &r.Payload, &headers, &r.CreatedAt, &r.Pos}
		if tok {
			dest = append(dest, &token)
		}
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				return err
			}
			r.AggregateID, r.TenantID, r.Headers = aggregateID.String, tenantID.String, headers.String
			out = append(out, r.Decode())
		}
		return rows.Err()
	})
	if err == nil && !pgxConn {
		return nil, 0, false, nil
	}
	return out, token, true, err
}
