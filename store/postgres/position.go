package postgres

import (
	"context"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/store/internal/schemacheck"
	"github.com/outboxkit/outbox/store/internal/sqlstore"
)

// positionSQL: positions from a sequence, gaps final by transaction ids.
//
// A position is taken by nextval when the INSERT runs, not when it
// commits, so a smaller position can commit after a larger one. A read
// takes as the token of the positions it did not see below the largest it
// saw the next transaction id to be assigned (nextXid, read as xmax plus
// age(xmax): age of a transaction id without one of its own is nextXid
// minus it): each such position was taken before a position the read saw
// committed, so before the read, by a transaction that already had its id,
// since the INSERT asks for the id first (the CASE below evaluates
// pg_current_xact_id() before nextval, and assigns an id to a transaction
// that has none yet). That id is below nextXid at the read. It need not be
// below the read's xmax, which is the latest completed id plus one: a
// transaction whose id is above every completed one is left out of the
// snapshot's running ids, and its snapshot's xmin can reach the xmax while
// it runs. Once pg_snapshot_xmin of a later snapshot reaches the token,
// every such transaction has ended: a position not found by a read made
// after that is final (rolled back). docs/design/position.md has the
// argument.
var positionSQL = &sqlstore.PositionSQL{
	NextPos:  `CASE WHEN pg_current_xact_id() IS NOT NULL THEN nextval('{{posseq}}') END`,
	Token:    "(" + nextXid + ")",
	Horizon:  "SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint, (" + nextXid + ")",
	Read:     readRows,
	ReadKeys: readKeys,
}

// nextXid is the next transaction id to be assigned, as a bigint (xid8),
// from the current snapshot's xmax, a 64-bit id, and age() of its low 32
// bits, which is nextXid minus them for a caller without an id of its own.
// The ids 0, 1 and 2 of each epoch are never assigned and age() gives them
// INT_MAX: xmax stands in on them by 3 of that epoch.
const nextXid = "SELECT x + (3 - LEAST(x % 4294967296, 3)) + age(GREATEST(x % 4294967296, 3)::text::xid) " +
	"FROM (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS x) AS snap"

// positionProvider gives Store the position.Source capability without
// showing it in the package's API.
type positionProvider = position.Provider

// newPositionProvider returns the position.Source of s, for New.
func newPositionProvider(s *Store) positionProvider { return position.NewProvider(s.newPositionLog) }

// newPositionLog returns the store side of position delivery
// (outbox.DeliveryPosition), for package outbox (through position.LogOf); nil on a partitioned
// table, where position delivery does not run yet.
func (s *Store) newPositionLog() position.Log { return s.shared.PositionLog(s.checkPosition) }

// checkPosition is the schema check of a table used by position delivery.
func (s *Store) checkPosition(ctx context.Context, db core.DBTX) error {
	return schemacheck.Check(ctx, db, s.schemaTarget(true))
}

// PosTable returns the table of the persisted position of position
// delivery, schema-qualified when it has a schema: the table's name with
// "_pos" appended.
func (s *Store) PosTable() string { return s.shared.PosTable() }
