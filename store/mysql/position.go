package mysql

import (
	"context"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/store/internal/schemacheck"
)

// PositionLog returns nil: position delivery (outbox.DeliveryPosition)
// does not run on MySQL and MariaDB yet, and outbox.New refuses it there.
func (s *Store) PositionLog() position.Log { return s.shared.PositionLog(s.checkPosition) }

// checkPosition is the schema check of a table used by position delivery.
func (s *Store) checkPosition(ctx context.Context, db core.DBTX) error {
	return schemacheck.Check(ctx, db, s.schemaTarget(true))
}

// PosTable returns the table of the persisted position of position
// delivery: the table's name with "_pos" appended.
func (s *Store) PosTable() string { return s.shared.PosTable() }
