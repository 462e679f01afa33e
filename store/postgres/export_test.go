package postgres

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

// GetStatement is the statement of Get(id), for the plan tests.
func GetStatement(s *Store, id string) sqlstore.Statement {
	return sqlstore.Statement{Name: "get", SQL: "SELECT * FROM " + s.shared.Table() + " WHERE event_id = $1", Args: []any{id}}
}

// MarkStatement has the shape of MarkDone's UPDATE (one id, fenced by the
// owner), for the plan tests.
func MarkStatement(s *Store, id string) sqlstore.Statement {
	return sqlstore.Statement{Name: "mark", SQL: "UPDATE " + s.shared.Table() + " SET status = 1, done_at = now(), " +
		"locked_by = NULL, locked_at = NULL WHERE event_id = $1 AND locked_by = $2 AND status IN (0, 2)", Args: []any{id, "explain"}}
}

// Channel is the NOTIFY channel of table, for the notification tests.
func Channel(table string) string { return channel(table) }

// IDBound is the event_id bound of time t, for the partition tests.
func IDBound(t time.Time) string { return idBound(t) }

// RawForm and FromRaw are the position read's decoding of the bytes the
// server sent, for the read tests.
var (
	RawForm = rawForm
	FromRaw = fromRaw
)

// GenericRead is the position reads' run of a query with the generic plan,
// for the read tests.
var GenericRead = genericRead
