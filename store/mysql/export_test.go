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
