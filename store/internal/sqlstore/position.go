package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/internal/writectx"
)

// PositionSQL is what position delivery needs of a dialect
// (internal/position and docs/design/position.md).
type PositionSQL struct {
	// NextPos is the expression of a new STREAM row's position in its
	// INSERT, a template (see RenderDDL). It must take positions in commit
	// order, or leave the reader a way to tell when a smaller position can
	// no longer commit (Token, Horizon).
	NextPos string
	// Token is a select-list expression, as a bigint, read with the rows of
	// a read: a position the read did not see below the largest it saw may
	// still commit until Horizon reaches it. "": such a position is final
	// at once (one writer at a time: SQLite).
	Token string
	// Horizon is the query of the smallest token a running transaction may
	// still hold, and of the token of a read made now. "" with Token "".
	Horizon string
	// HorizonInTx: Horizon runs in a transaction of its own, after a read
	// of the position table that starts it (MariaDB: the query sees its own
	// transaction in information_schema.innodb_trx only when the server
	// refreshed that view after the transaction began).
	HorizonInTx bool
	// HorizonWarnings: a Horizon query that raised a warning gives 0
	// (MariaDB truncates innodb_trx past its memory limit, with a warning).
	// Needs HorizonInTx, which runs both on one connection.
	HorizonWarnings bool
	// HorizonEvery is the least time between two Horizon queries; a
	// Horizon called sooner returns the last horizon (still true: no
	// transaction below it runs) and a token read with "SELECT " + Token.
	// MariaDB: innodb_trx is refreshed only when nobody read it for 100 ms,
	// so a reader that asks more often keeps it stale.
	HorizonEvery time.Duration
	// ReadPrefix is put before the reads that take Token (MariaDB: SET
	// STATEMENT time_zone = ... FOR).
	ReadPrefix string
	// ClaimInTx: the position row is taken in a transaction of three
	// statements (an INSERT that does nothing when the row exists, ending
	// with InsertIgnore; an UPDATE; a SELECT), for a dialect without
	// RETURNING on an upsert (MySQL, MariaDB). Default: in one statement,
	// INSERT ... ON CONFLICT (relay) DO UPDATE ... RETURNING.
	ClaimInTx bool
	// InsertIgnore ends the INSERT of ClaimInTx.
	InsertIgnore string
	// RowsPerInsert caps the rows of one STREAM INSERT: 1 where NextPos
	// reads the table (SQLite), so that each row sees the one before.
	// Default: as many as the insert limits allow.
	RowsPerInsert int
	// Read, when set, runs a position read (query, of readCols then Token's
	// column when tok, with args) on the connection behind db without
	// database/sql, whose conversions cost more than the rest of a read,
	// and appends the rows to dst. It reports false when db is not one it
	// reads from; the read then goes through db.
	Read func(ctx context.Context, db core.DBTX, dst []position.Row, query string, tok bool, args ...any) (rows []position.Row, token int64, ok bool, err error)
	// ReadKeys, when set, runs the read of positions and ids alone
	// (ReadKeysAfter's query: pos, event_id and the token, with args) as
	// Read runs reads; it reports false when db is not one it reads from.
	ReadKeys func(ctx context.Context, db core.DBTX, query string, args ...any) (rows []position.Row, token int64, ok bool, err error)
}

// positionRelay is the key of a table's row in its position table: one
// reader per table.
const positionRelay = "default"

// PositionLog returns the store's position.Log, whose CheckSchema is check,
// or nil when its dialect has no position delivery.
func (s *Store) PositionLog(check func(ctx context.Context, db core.DBTX) error) position.Log {
	if s.d.Position == nil {
		return nil
	}
	l := &posLog{s: s, pt: s.table.PosTable().Quoted(s.d.Quote),
		nextPos: RenderDDL(s.d.Position.NextPos, s.table, s.d.Quote), check: check}
	l.insertRow = s.d.rebind("INSERT INTO " + s.qt + " (" + streamInsertCols + ") VALUES " + l.rowValues() +
		" RETURNING event_id, pos")
	for shape := range l.insertOne {
		l.insertOne[shape] = s.d.rebind("INSERT INTO " + s.qt + " (" + streamInsertCols + ") VALUES " +
			l.oneRowValues(shape) + " RETURNING pos")
	}
	token := "0"
	if t := s.d.Position.Token; t != "" {
		token = t
	}
	l.readAfter = s.d.rebind(s.d.Position.ReadPrefix + "SELECT " + readCols + ", " + token + " FROM " + s.qt + " WHERE pos > ? AND status = " + stStream +
		" ORDER BY pos LIMIT ?")
	l.readKeysAfter = s.d.rebind(s.d.Position.ReadPrefix + "SELECT pos, event_id, " + token + " FROM " + s.qt + " WHERE pos > ? AND status = " + stStream +
		" ORDER BY pos LIMIT ?")
	return l
}

// rowValues is the VALUES list of one STREAM row of a multi-row INSERT.
func (l *posLog) rowValues() string {
	return "(?, ?, ?, ?, ?, ?, ?, " + stStream + ", 0, ?, ?, " + l.nextPos + ")"
}

// oneRowValues is the VALUES list of a single STREAM row whose bound
// optional columns are the bits of shape (oneRowAggregateID,
// oneRowTenantID, oneRowHeaders); the others are NULL literals.
func (l *posLog) oneRowValues(shape int) string {
	opt := func(bit int) string {
		if shape&bit != 0 {
			return "?"
		}
		return "NULL"
	}
	return "(?, ?, ?, " + opt(oneRowAggregateID) + ", " + opt(oneRowTenantID) + ", ?, " + opt(oneRowHeaders) +
		", " + stStream + ", 0, ?, ?, " + l.nextPos + ")"
}

// streamShapes is the number of single-row STREAM INSERT statements: a
// STREAM row has no lease, so oneRowLeased is never set.
const streamShapes = oneRowLeased

// CheckSchema implements position.Log.
func (l *posLog) CheckSchema(ctx context.Context, db core.DBTX) error { return l.check(ctx, db) }

// PosTable returns the table of the persisted position, schema-qualified
// when it has a schema.
func (s *Store) PosTable() string { return s.table.PosTable().String() }

type posLog struct {
	s       *Store
	pt      string // quoted position table
	nextPos string
	check   func(ctx context.Context, db core.DBTX) error
	// The statements every write or read runs, built once: insertOne by
	// the shape of a single event's row (see oneRowValues), insertRow a
	// statement of one row of a longer write (RowsPerInsert 1, or the last).
	insertOne                           [streamShapes]string
	insertRow, readAfter, readKeysAfter string
	// lastRead is the number of rows the last ReadAfter returned: the
	// next one's slice starts with that room, so that a drain's reads do
	// not grow theirs as they go and an idle reader's allocate nothing.
	lastRead atomic.Int64

	horizonMu sync.Mutex // HorizonEvery: the last horizon and when it was read
	horizonAt time.Time
	horizon   int64
}

var _ position.Log = (*posLog)(nil)

const streamInsertCols = "event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, " +
	"status, attempts, available_at, created_at, pos"

// InsertStream implements position.Log. A write of more rows than one
// statement takes is all-or-nothing, as InsertOrdered's, so that a failure
// in a later statement (a duplicate id, say) leaves none of the batch
// behind when the caller commits anyway, and the caller's transaction
// usable (PostgreSQL's too, which a failed statement aborts): in a
// transaction of its own when db is a pool, else under a savepoint. The
// positions a rolled-back statement took are gaps, final once its
// transaction has ended.
func (l *posLog) InsertStream(ctx context.Context, db core.DBTX, envs []core.Envelope) ([]int64, error) {
	s := l.s
	if l.fits(envs) {
		return l.insertStream(ctx, db, envs) // one statement
	}
	var pos []int64
	write := func(tx core.DBTX) (err error) {
		pos, err = l.insertStream(ctx, tx, envs)
		return err
	}
	if _, isPool := db.(core.TxBeginner); isPool {
		return pos, inTxOpts(ctx, db, nil, write)
	}
	const sp = "outbox_insert_stream"
	if _, err := db.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
		return nil, s.wrap("insert events", err)
	}
	if err := write(db); err != nil {
		if _, rerr := db.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+sp); rerr != nil {
			return nil, errors.Join(err, s.wrap("roll back partial insert", rerr))
		}
		return nil, err
	}
	if _, err := db.ExecContext(ctx, "RELEASE SAVEPOINT "+sp); err != nil {
		return nil, s.wrap("insert events", err)
	}
	return pos, nil
}

// fits reports whether envs fit in one STREAM INSERT.
func (l *posLog) fits(envs []core.Envelope) bool {
	maxRows := l.s.maxInsertRows()
	if n := l.s.d.Position.RowsPerInsert; n > 0 {
		maxRows = n
	}
	bytes := 0
	for _, env := range envs {
		bytes += env.PayloadLen()
	}
	return len(envs) <= maxRows && bytes <= maxInsertBytes
}

// insertStream writes envs as STREAM rows in as few statements as the
// limits allow.
func (l *posLog) insertStream(ctx context.Context, db core.DBTX, envs []core.Envelope) ([]int64, error) {
	for _, env := range envs {
		if err := env.Validate(); err != nil {
			return nil, fmt.Errorf("insert event %s: %w", env.ID(), err)
		}
	}
	s := l.s
	if len(envs) == 1 {
		p, err := l.insertOneRow(ctx, db, envs[0])
		if err != nil {
			return nil, err
		}
		return []int64{p}, nil
	}
	pos := make([]int64, len(envs))
	at := positionsByID(envs, func(i int, p int64) { pos[i] = p })
	err := l.statements(envs, func(q string, args []any) error {
		res, err := db.QueryContext(ctx, q, args...)
		if err != nil {
			return s.wrap("insert events", err)
		}
		defer res.Close()
		for res.Next() {
			if err := at(res.Scan); err != nil {
				return s.wrap("insert events", err)
			}
		}
		return s.wrap("insert events", res.Err())
	})
	if err != nil {
		return nil, err
	}
	for i, p := range pos {
		if p == 0 {
			return nil, fmt.Errorf("insert events: no position returned for event %s", envs[i].ID())
		}
	}
	return pos, nil
}

// positionsByID returns what reads a row (event_id, pos) of a multi-row
// STREAM INSERT and hands the position to at by the event's index in envs:
// such an INSERT returns its rows in no set order.
func positionsByID(envs []core.Envelope, at func(i int, pos int64)) func(scan func(dest ...any) error) error {
	index := make(map[string]int, len(envs))
	for i, env := range envs {
		index[env.ID()] = i
	}
	return func(scan func(dest ...any) error) error {
		var id string
		var p int64
		if err := scan(&id, &p); err != nil {
			return err
		}
		if i, ok := index[id]; ok {
			at(i, p)
		}
		return nil
	}
}

// statements hands run the statements, each returning (event_id, pos) of
// its rows, that write envs (validated) as STREAM rows, in as few as the
// limits allow.
func (l *posLog) statements(envs []core.Envelope, run func(q string, args []any) error) error {
	s := l.s
	maxRows := s.maxInsertRows()
	if n := s.d.Position.RowsPerInsert; n > 0 {
		maxRows = n
	}
	var sb strings.Builder
	var args []any
	rows, bytes := 0, 0
	flush := func() error {
		if rows == 0 {
			return nil
		}
		q := l.insertRow
		if rows > 1 {
			sb.WriteString(" RETURNING event_id, pos")
			q = s.d.rebind(sb.String())
		}
		err := run(q, args)
		sb.Reset()
		args, rows, bytes = args[:0], 0, 0
		return err
	}
	for _, env := range envs {
		payload, headers, err := rowBody(env)
		if err != nil {
			return err
		}
		if rows > 0 && (rows == maxRows || bytes+len(payload) > maxInsertBytes) {
			if err := flush(); err != nil {
				return err
			}
		}
		if rows == 0 {
			sb.WriteString("INSERT INTO " + s.qt + " (" + streamInsertCols + ") VALUES ")
		} else {
			sb.WriteString(", ")
		}
		sb.WriteString(l.rowValues())
		createdAt := s.ts(env.OccurredAt())
		args = append(args, env.ID(), env.Type(), env.AggregateType(), nullIfEmpty(env.AggregateID()),
			nullIfEmpty(env.TenantID()), payload, headers, s.tsOr(env.AvailableAt(), env.OccurredAt(), createdAt), createdAt)
		rows++
		bytes += len(payload)
	}
	return flush()
}

// insertOneRow writes the STREAM row of one event, the common write (one
// event per business transaction), and returns its position. Its statement
// is prepared text and binds only the values the row has, as the claim
// path's single-row insert does: no statement building, no id index, and
// only the position returned.
func (l *posLog) insertOneRow(ctx context.Context, db core.DBTX, env core.Envelope) (int64, error) {
	args, shape, err := l.s.oneRowArgs(env)
	if err != nil {
		return 0, err
	}
	var p int64
	if err := db.QueryRowContext(ctx, l.insertOne[shape], args...).Scan(&p); err != nil {
		return 0, l.s.wrap("insert events", err)
	}
	if p == 0 {
		return 0, fmt.Errorf("insert events: no position returned for event %s", env.ID())
	}
	return p, nil
}

// InsertStreamHeld implements position.HeldInserter: a write that fits in
// one statement goes to db with ExecContext, the positions handed to at
// from the rows its INSERT returns (see writectx.WithRows), when db's
// transaction sends it; a larger write is InsertStream's.
func (l *posLog) InsertStreamHeld(ctx context.Context, db core.DBTX, envs []core.Envelope, at func(i int, pos int64)) error {
	if !l.fits(envs) {
		pos, err := l.InsertStream(ctx, db, envs)
		for i, p := range pos {
			at(i, p)
		}
		return err
	}
	for _, env := range envs {
		if err := env.Validate(); err != nil {
			return fmt.Errorf("insert event %s: %w", env.ID(), err)
		}
	}
	if len(envs) == 1 {
		args, shape, err := l.s.oneRowArgs(envs[0])
		if err != nil {
			return err
		}
		rows := writectx.WithRows(ctx, func(scan func(dest ...any) error) error {
			var p int64
			if err := scan(&p); err != nil {
				return err
			}
			at(0, p)
			return nil
		})
		_, err = db.ExecContext(rows, l.insertOne[shape], args...)
		return l.s.wrap("insert events", err)
	}
	rows := writectx.WithRows(ctx, positionsByID(envs, at))
	return l.statements(envs, func(q string, args []any) error {
		_, err := db.ExecContext(rows, q, args...)
		return l.s.wrap("insert events", err)
	})
}

// readCols are the columns of a position read: those a STREAM row was
// written with (streamInsertCols), then pos. The others are known without
// reading them (streamDest).
const readCols = "event_id, event_type, aggregate_type, aggregate_id, tenant_id, payload, headers, created_at, pos"

// ReadAfter implements position.Log.
func (l *posLog) ReadAfter(ctx context.Context, db core.DBTX, after int64, limit int) ([]position.Row, position.Token, error) {
	var dst []position.Row
	if n := l.lastRead.Load(); n > 0 {
		dst = make([]position.Row, 0, min(n, int64(limit)))
	}
	out, tok, err := l.read(ctx, db, dst, l.readAfter, true, after, limit)
	l.lastRead.Store(int64(len(out)))
	if err != nil {
		return nil, 0, fmt.Errorf("read events after position %d: %w", after, err)
	}
	return out, position.Token(tok), nil
}

// read runs query, whose columns are readCols and, with tok, the token
// after them, through the dialect's Read when it takes db, and appends the
// rows to dst.
func (l *posLog) read(ctx context.Context, db core.DBTX, dst []position.Row, query string, tok bool, args ...any) ([]position.Row, int64, error) {
	if read := l.s.d.Position.Read; read != nil {
		if rows, token, ok, err := read(ctx, db, dst, query, tok, args...); ok {
			return rows, token, err
		}
	}
	res, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, 0, err
	}
	var token int64
	dest := &token
	if !tok {
		dest = nil
	}
	rows, err := scanPosRows(res, dst, dest)
	return rows, token, err
}

// ReadKeysAfter implements position.Log.
func (l *posLog) ReadKeysAfter(ctx context.Context, db core.DBTX, after int64, limit int) ([]position.Row, position.Token, error) {
	if read := l.s.d.Position.ReadKeys; read != nil {
		if rows, tok, ok, err := read(ctx, db, l.readKeysAfter, after, limit); ok {
			if err != nil {
				return nil, 0, fmt.Errorf("read positions after %d: %w", after, err)
			}
			return rows, position.Token(tok), nil
		}
	}
	res, err := db.QueryContext(ctx, l.readKeysAfter, after, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("read positions after %d: %w", after, err)
	}
	defer res.Close()
	var out []position.Row
	var tok int64
	for res.Next() {
		var r position.Row
		if err := res.Scan(&r.Pos, &r.ID, &tok); err != nil {
			return nil, 0, fmt.Errorf("read positions after %d: %w", after, err)
		}
		out = append(out, r)
	}
	if err := res.Err(); err != nil {
		return nil, 0, fmt.Errorf("read positions after %d: %w", after, err)
	}
	return out, position.Token(tok), nil
}

// maxRangesPerRead bounds the ranges of one ReadRanges statement.
const maxRangesPerRead = 64

// ReadRanges implements position.Log.
func (l *posLog) ReadRanges(ctx context.Context, db core.DBTX, rs []position.Range) ([]position.Row, error) {
	s := l.s
	var out []position.Row
	for len(rs) > 0 {
		n := min(len(rs), maxRangesPerRead)
		var sb strings.Builder
		args := make([]any, 0, 2*n)
		sb.WriteString("SELECT " + readCols + " FROM " + s.qt + " WHERE status = " + stStream + " AND (")
		for i, r := range rs[:n] {
			if i > 0 {
				sb.WriteString(" OR ")
			}
			sb.WriteString("pos BETWEEN ? AND ?")
			args = append(args, r.Lo, r.Hi)
		}
		sb.WriteString(") ORDER BY pos")
		rows, _, err := l.read(ctx, db, nil, s.d.rebind(sb.String()), false, args...)
		if err != nil {
			return nil, fmt.Errorf("read events in open positions: %w", err)
		}
		out = append(out, rows...)
		rs = rs[n:]
	}
	return out, nil
}

// scanPosRows appends to out the rows of readCols, and reads the token
// after them when tok is not nil.
func scanPosRows(rows *sql.Rows, out []position.Row, tok *int64) ([]position.Row, error) {
	defer rows.Close()
	var r row
	var pos int64
	dest := append(r.streamDest(), &pos)
	if tok != nil {
		dest = append(dest, tok)
	}
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("scan event: %w", err)
		}
		out = append(out, r.streamRow(pos))
	}
	return out, rows.Err()
}

// StreamRow is a STREAM row as a position read returns it (readCols), for a
// dialect's PositionSQL.Read; a NULL column is "".
type StreamRow struct {
	Pos                                                          int64
	ID, EventType, AggregateType, AggregateID, TenantID, Headers string
	Payload                                                      []byte
	CreatedAt                                                    time.Time
}

// Decode returns the row as the reader takes it: its event, or the error
// that makes it undecodable.
func (s StreamRow) Decode() position.Row {
	r := row{id: s.ID, eventType: s.EventType, aggregateType: s.AggregateType,
		aggregateID: sql.NullString{String: s.AggregateID, Valid: true}, tenantID: sql.NullString{String: s.TenantID, Valid: true},
		headers: sql.NullString{String: s.Headers, Valid: true}, payload: s.Payload, createdAt: nullTime{Time: s.CreatedAt, Valid: true}}
	return r.streamRow(s.Pos)
}

// Horizon implements position.Log.
func (l *posLog) Horizon(ctx context.Context, db core.DBTX) (position.Token, position.Token, error) {
	p := l.s.d.Position
	if p.Horizon == "" {
		return position.Token(^uint64(0)), 0, nil
	}
	var horizon, now int64
	if p.HorizonEvery > 0 {
		l.horizonMu.Lock()
		defer l.horizonMu.Unlock()
		if time.Since(l.horizonAt) < p.HorizonEvery {
			if err := db.QueryRowContext(ctx, p.ReadPrefix+"SELECT "+p.Token).Scan(&now); err != nil {
				return 0, 0, fmt.Errorf("read the transaction horizon: %w", err)
			}
			return position.Token(l.horizon), position.Token(now), nil
		}
	}
	read := func(db core.DBTX) error { return db.QueryRowContext(ctx, l.s.d.rebind(p.Horizon)).Scan(&horizon, &now) }
	if p.HorizonInTx {
		read = func(db core.DBTX) error {
			return inTx(ctx, db, func(tx core.DBTX) error {
				var n int
				if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+l.pt).Scan(&n); err != nil {
					return err
				}
				if err := tx.QueryRowContext(ctx, l.s.d.rebind(p.Horizon)).Scan(&horizon, &now); err != nil {
					return err
				}
				if p.HorizonWarnings {
					var warnings int
					if err := tx.QueryRowContext(ctx, "SELECT @@warning_count").Scan(&warnings); err != nil {
						return err
					}
					if warnings > 0 {
						horizon = 0
					}
				}
				return nil
			})
		}
	}
	if err := read(db); err != nil {
		return 0, 0, fmt.Errorf("read the transaction horizon: %w", err)
	}
	horizon = max(horizon, 0)
	if p.HorizonEvery > 0 {
		// A stale view gives 0: keep the last horizon, which still holds.
		l.horizonAt, l.horizon = time.Now(), max(horizon, l.horizon)
		horizon = l.horizon
	}
	return position.Token(horizon), position.Token(now), nil
}

// ClaimState implements position.Log.
func (l *posLog) ClaimState(ctx context.Context, db core.DBTX, owner string, now time.Time) (position.State, error) {
	s := l.s
	const cols = "floor_pos, cursor_pos, open_pos, owner, updated_at"
	insert := s.d.rebind("INSERT INTO " + l.pt + " (relay, " + cols + ") VALUES (?, 0, 0, '[]', ?, ?) ")
	var st position.State
	var err error
	if !s.d.Position.ClaimInTx {
		// One statement, one round trip: a reader's Start and a
		// standby's takeover wait for it.
		st, err = scanState(db.QueryRowContext(ctx, insert+"ON CONFLICT (relay) DO UPDATE SET owner = excluded.owner, "+
			"updated_at = excluded.updated_at RETURNING "+cols, positionRelay, owner, s.ts(now)))
	} else {
		err = inTx(ctx, db, func(tx core.DBTX) error {
			if _, err := tx.ExecContext(ctx, insert+s.d.Position.InsertIgnore, positionRelay, owner, s.ts(now)); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, s.d.rebind("UPDATE "+l.pt+" SET owner = ?, updated_at = ? WHERE relay = ?"),
				owner, s.ts(now), positionRelay); err != nil {
				return err
			}
			var err error
			st, err = l.load(ctx, tx)
			return err
		})
	}
	if err != nil {
		return position.State{}, fmt.Errorf("take the position of %s: %w", s.table, err)
	}
	return st, nil
}

// LoadState implements position.Log.
func (l *posLog) LoadState(ctx context.Context, db core.DBTX) (position.State, error) {
	st, err := l.load(ctx, db)
	if errors.Is(err, sql.ErrNoRows) {
		return position.State{}, nil
	}
	if err != nil {
		return position.State{}, fmt.Errorf("read the position of %s: %w", l.s.table, err)
	}
	return st, nil
}

func (l *posLog) load(ctx context.Context, db core.DBTX) (position.State, error) {
	return scanState(db.QueryRowContext(ctx, l.s.d.rebind("SELECT floor_pos, cursor_pos, open_pos, owner, updated_at FROM "+l.pt+
		" WHERE relay = ?"), positionRelay))
}

// scanState reads a position row: floor_pos, cursor_pos, open_pos, owner,
// updated_at.
func scanState(row *sql.Row) (position.State, error) {
	var st position.State
	var open string
	var at nullTime
	if err := row.Scan(&st.Floor, &st.Cursor, &open, &st.Owner, &at); err != nil {
		return position.State{}, err
	}
	st.UpdatedAt = at.Time
	var err error
	if st.Open, err = decodeRanges(open); err != nil {
		return position.State{}, err
	}
	return st, nil
}

// SaveState implements position.Log.
func (l *posLog) SaveState(ctx context.Context, db core.DBTX, owner string, st position.State, now time.Time) (bool, error) {
	s := l.s
	n, err := s.exec(ctx, db, "UPDATE "+l.pt+" SET floor_pos = ?, cursor_pos = ?, open_pos = ?, updated_at = ? "+
		"WHERE relay = ? AND owner = ?", st.Floor, st.Cursor, encodeRanges(st.Open), s.ts(now), positionRelay, owner)
	if err != nil {
		return false, fmt.Errorf("save the position of %s: %w", s.table, err)
	}
	return n == 1, nil
}

// MarkFailed implements position.Log.
func (l *posLog) MarkFailed(ctx context.Context, db core.DBTX, id string, dead bool, at time.Time, lastErr string) (bool, error) {
	s := l.s
	q := "UPDATE " + s.qt + " SET status = " + stRetry + ", attempts = attempts + 1, available_at = ?, last_error = ? " +
		"WHERE event_id = ? AND status = " + stStream
	if dead {
		q = "UPDATE " + s.qt + " SET status = " + stDead + ", attempts = attempts + 1, done_at = ?, last_error = ? " +
			"WHERE event_id = ? AND status = " + stStream
	}
	n, err := s.exec(ctx, db, q, s.ts(at), core.TruncateError(lastErr), id)
	if err != nil {
		return false, s.wrap("mark stream event failed", err)
	}
	return n == 1, nil
}

// PurgeStream implements position.Log: the rows below the floor in
// position order, through the stream index.
func (l *posLog) PurgeStream(ctx context.Context, db core.DBTX, before time.Time, limit int) (int64, error) {
	s := l.s
	where := "pos IS NOT NULL AND pos <= (SELECT floor_pos FROM " + l.pt + " WHERE relay = ?) AND status = " + stStream +
		" AND created_at < ? ORDER BY pos LIMIT ?"
	q := "DELETE FROM " + s.qt + " WHERE " + s.d.idsIn("SELECT event_id FROM "+s.qt+" WHERE "+where)
	if s.d.LimitedWrites {
		q = "DELETE FROM " + s.qt + " WHERE " + where
	}
	n, err := s.exec(ctx, db, q, positionRelay, s.ts(before), limit)
	return n, s.wrap("purge delivered stream events", err)
}

// encodeRanges writes rs as JSON pairs: [[lo,hi],...].
func encodeRanges(rs []position.Range) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('[')
		b.WriteString(strconv.FormatInt(r.Lo, 10))
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(r.Hi, 10))
		b.WriteByte(']')
	}
	b.WriteByte(']')
	return b.String()
}

func decodeRanges(s string) ([]position.Range, error) {
	var pairs [][2]int64
	if err := json.Unmarshal([]byte(s), &pairs); err != nil {
		return nil, fmt.Errorf("open positions %q: %w", s, err)
	}
	rs := make([]position.Range, len(pairs))
	for i, p := range pairs {
		rs[i] = position.Range{Lo: p[0], Hi: p[1]}
	}
	return rs, nil
}
