package sqlite

import (
	"context"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/store/internal/schemacheck"
	"github.com/outboxkit/outbox/store/internal/sqlstore"
)

// positionSQL: SQLite has one writer at a time, and the INSERT takes its
// position, one more than the largest of the table and of the persisted
// cursor, while it holds the write lock: positions commit in order, a
// position never goes back (a purge deletes only rows at or below the
// persisted floor, which the cursor never falls below), and a position a
// read does not see below the largest it saw is final at once. "pos IS
// NOT NULL" lets the partial stream index answer MAX(pos) from its last
// entry; without it SQLite scans the table, once per INSERT.
var positionSQL = &sqlstore.PositionSQL{
	NextPos: "(SELECT COALESCE(MAX(m), 0) + 1 FROM (SELECT MAX(pos) AS m FROM {{table}} WHERE pos IS NOT NULL " +
		"UNION ALL SELECT MAX(cursor_pos) FROM {{postable}}))",
	RowsPerInsert: 1,
}

// positionProvider gives Store the position.Source capability without
// showing it in the package's API.
type positionProvider = position.Provider

// newPositionProvider returns the position.Source of s, for New.
func newPositionProvider(s *Store) positionProvider { return position.NewProvider(s.newPositionLog) }

// newPositionLog returns the store side of position delivery
// (outbox.DeliveryPosition), for package outbox (through position.LogOf).
func (s *Store) newPositionLog() position.Log { return s.shared.PositionLog(s.checkPosition) }

// checkPosition is the schema check of a table used by position delivery.
func (s *Store) checkPosition(ctx context.Context, db core.DBTX) error {
	return schemacheck.Check(ctx, db, s.schemaTarget(true))
}

// PosTable returns the table of the persisted position of position
// delivery: the table's name with "_pos" appended.
func (s *Store) PosTable() string { return s.shared.PosTable() }
