package mysql

import (
	"time"

	"github.com/outboxkit/outbox/store/internal/sqlstore"
)

// PlanStatements gives the plan tests the statements of s that must walk an
// index, as the store runs them.
func PlanStatements(s *Store, now time.Time) []sqlstore.Statement {
	return sqlstore.PlanStatements(s.shared, now)
}

// LegacyDDL returns the statements of the previous release's CreateSchema
// (schema.sql alone) for s's table.
func LegacyDDL(s *Store) []string { return s.shared.BaseDDL() }

// KeyPlanStatements gives the plan tests the key statements of a DONE batch
// of the largest size.
func KeyPlanStatements(s *Store, aggType string, aggIDs []string, now time.Time) []sqlstore.Statement {
	return sqlstore.KeyPlanStatements(s.shared, aggType, aggIDs, now)
}

// NextPosSQL returns the expression of a new STREAM row's position on s's
// table, as its INSERT runs it.
func NextPosSQL(s *Store) string { return sqlstore.RenderDDL(positionSQL.NextPos, s.table, quote) }
