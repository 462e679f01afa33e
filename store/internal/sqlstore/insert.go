package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outbox/core"
)

const insertCols = 14

// Insert implements core.Store: InsertOrdered without the list of waiting
// events.
func (s *Store) Insert(ctx context.Context, db core.DBTX, envs []core.Envelope, opts core.InsertOptions) error {
	_, err := s.InsertOrdered(ctx, db, envs, opts)
	return err
}

// InsertOrdered implements core.OrderedStore.
//
// Every envelope is validated before anything is written. Ordered envelopes
// (see core.Ordering) first take their sequence numbers from their keys'
// counter rows, one upsert per key in key order, which locks each key's row
// until the transaction ends (see order.go); under KeysWritableCTE, a write
// that fits in one statement does both in that one (keyStrategy.insertAll).
//
// An ordered write is all-or-nothing, so that a failure in a later
// statement (a duplicate id, say) leaves none of the batch behind, no
// sequence number taken without its event, and the caller's transaction
// usable: in one statement (KeysWritableCTE); in a transaction of its own when
// db is a pool; in the caller's transaction when a failed statement aborts
// it (ErrorAbortsTx), or when the dialect can tell the errors after which
// it stays open (KeepsTx) and the write gives its sequence numbers back
// after those; else under a savepoint. A batch too large for one statement
// is written the same way.
func (s *Store) InsertOrdered(ctx context.Context, db core.DBTX, envs []core.Envelope, opts core.InsertOptions) (core.InsertResult, error) {
	bytes := 0
	for _, env := range envs {
		if err := env.Validate(); err != nil {
			return core.InsertResult{}, fmt.Errorf("insert event %s: %w", env.ID(), err)
		}
		bytes += env.PayloadLen()
	}
	keys, err := s.orderedKeys(envs)
	if err != nil {
		return core.InsertResult{}, err
	}
	fits := len(envs) <= s.maxInsertRows() && bytes <= maxInsertBytes
	if fits && len(keys) > 0 {
		if res, ok, err := s.keys.insertAll(ctx, db, envs, keys, opts); ok || err != nil {
			return res, err
		}
	}
	var res core.InsertResult
	var taken []seqRange
	write := func(tx core.DBTX) error {
		plan, w, t, err := s.allocate(ctx, tx, envs, keys)
		taken = t
		if err != nil {
			return err
		}
		res.Waiting = w
		if plan != nil {
			res.Seqs = make([]int64, len(plan))
			for i, p := range plan {
				res.Seqs[i] = p.seq
			}
		}
		return s.insert(ctx, tx, envs, plan, opts)
	}
	if _, isPool := db.(core.TxBeginner); fits && (len(keys) == 0 || !isPool && (s.d.ErrorAbortsTx || s.d.KeepsTx != nil)) {
		if err := write(db); err != nil {
			return core.InsertResult{}, s.giveBack(ctx, db, taken, err)
		}
		return res, nil
	}
	if _, isPool := db.(core.TxBeginner); isPool {
		err := inTxOpts(ctx, db, nil, write)
		return res, err
	}
	const sp = "outbox_insert"
	if _, err := db.ExecContext(ctx, "SAVEPOINT "+sp); err != nil {
		return core.InsertResult{}, s.wrap("insert events", err)
	}
	if err := write(db); err != nil {
		if _, rerr := db.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+sp); rerr != nil {
			return core.InsertResult{}, errors.Join(err, s.wrap("roll back partial insert", rerr))
		}
		return core.InsertResult{}, err
	}
	_, err = db.ExecContext(ctx, "RELEASE SAVEPOINT "+sp)
	return res, s.wrap("insert events", err)
}

// maxInsertBytes caps the payload bytes of one INSERT statement.
const maxInsertBytes = 4 << 20

func (s *Store) maxInsertRows() int { return min(s.d.MaxParams/insertCols, 1000) }

// insert writes envs in as few multi-row statements as the limits allow;
// plan, when not nil, gives each envelope's status and sequence number.
// Waiting rows are never leased.
func (s *Store) insert(ctx context.Context, db core.DBTX, envs []core.Envelope, plan []rowPlan, opts core.InsertOptions) error {
	var lockedBy, lockedAt any
	if opts.LeaseOwner != "" {
		at := opts.LeaseAt
		if s.d.Claim == ClaimUpdateThenSelect {
			at = s.leases.next(at)
		}
		lockedBy, lockedAt = opts.LeaseOwner, s.ts(at)
	}
	if len(envs) == 1 && (plan == nil || plan[0].seq == 0) {
		return s.insertOneRow(ctx, db, envs[0], lockedBy, lockedAt)
	}
	maxRows := s.maxInsertRows()
	args := make([]any, 0, min(len(envs), maxRows)*insertCols)
	var sb strings.Builder
	rows, bytes := 0, 0
	flush := func() error {
		if rows == 0 {
			return nil
		}
		_, err := db.ExecContext(ctx, s.d.rebind(sb.String()), args...)
		sb.Reset()
		args, rows, bytes = args[:0], 0, 0
		return s.wrap("insert events", err)
	}
	for i, env := range envs {
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
			sb.WriteString(s.insertPrefix)
		} else {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?)")
		status, seq, by, at := core.StatusNew, any(nil), lockedBy, lockedAt
		if plan != nil && plan[i].seq != 0 {
			status, seq = plan[i].status, plan[i].seq
			if status == core.StatusWaiting {
				by, at = nil, nil
			}
		}
		createdAt := s.ts(env.OccurredAt())
		args = append(args, env.ID(), env.Type(), env.AggregateType(), nullIfEmpty(env.AggregateID()),
			nullIfEmpty(env.TenantID()), payload, headers, int16(status), s.tsOr(env.AvailableAt(), env.OccurredAt(), createdAt),
			createdAt, by, at, seq)
		rows++
		bytes += len(payload)
	}
	return flush()
}

// The columns a single-row insert binds only when they have a value;
// without one it writes them as literals (NULL).
const (
	oneRowAggregateID = 1 << iota
	oneRowTenantID
	oneRowHeaders
	oneRowLeased
	oneRowShapes = 1 << iota
)

// oneRowValues returns the VALUES list of a single unordered NEW event whose
// bound optional columns are the bits of shape. The status, attempts and
// seq of such a row are always 0, 0 and NULL.
func oneRowValues(shape int) string {
	opt := func(bit int) string {
		if shape&bit != 0 {
			return "?"
		}
		return "NULL"
	}
	lease := "NULL, NULL"
	if shape&oneRowLeased != 0 {
		lease = "?, ?"
	}
	return "(?, ?, ?, " + opt(oneRowAggregateID) + ", " + opt(oneRowTenantID) + ", ?, " + opt(oneRowHeaders) +
		", " + stNew + ", 0, ?, ?, " + lease + ", NULL)"
}

// rowBody returns the payload (never nil: the column is NOT NULL) and the
// encoded headers of env's row.
func rowBody(env core.Envelope) (payload []byte, headers any, err error) {
	headers, err = encodeHeaders(env.RawHeaders())
	if err != nil {
		return nil, nil, err
	}
	payload = env.RawPayload()
	if payload == nil {
		payload = []byte{}
	}
	return payload, headers, nil
}

// insertOneRow writes one unordered event: the common write, one event per
// business transaction. Its statement is prepared text (insertOne) and binds
// only the values the row has, so that a write costs no statement building
// and as few arguments as it needs.
func (s *Store) insertOneRow(ctx context.Context, db core.DBTX, env core.Envelope, lockedBy, lockedAt any) error {
	args, shape, err := s.oneRowArgs(env)
	if err != nil {
		return err
	}
	if lockedBy != nil {
		shape |= oneRowLeased
		args = append(args, lockedBy, lockedAt)
	}
	_, err = db.ExecContext(ctx, s.insertOne[shape], args...)
	return s.wrap("insert events", err)
}

// oneRowArgs returns the values a one-row INSERT binds for env, those it
// has of the optional ones, and the row's shape, which names them.
func (s *Store) oneRowArgs(env core.Envelope) ([]any, int, error) {
	payload, headers, err := rowBody(env)
	if err != nil {
		return nil, 0, err
	}
	createdAt := s.ts(env.OccurredAt())
	args := make([]any, 0, insertCols)
	args = append(args, env.ID(), env.Type(), env.AggregateType())
	shape := 0
	if id := env.AggregateID(); id != "" {
		shape |= oneRowAggregateID
		args = append(args, id)
	}
	if id := env.TenantID(); id != "" {
		shape |= oneRowTenantID
		args = append(args, id)
	}
	args = append(args, payload)
	if headers != nil {
		shape |= oneRowHeaders
		args = append(args, headers)
	}
	return append(args, s.tsOr(env.AvailableAt(), env.OccurredAt(), createdAt), createdAt), shape, nil
}

// tsOr returns the encoding of t, or encoded, the encoding of same, when t
// is same: an event's availability is its creation time unless delayed, and
// encoding it once spares an allocation.
func (s *Store) tsOr(t, same time.Time, encoded any) any {
	if t.Equal(same) {
		return encoded
	}
	return s.ts(t)
}
