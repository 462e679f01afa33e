package sqlite

import (
	"context"
	"strings"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/internal/schemacheck"
)

var _ core.SchemaChecker = (*Store)(nil)

// CheckSchema implements core.SchemaChecker: it returns a *core.SchemaError
// when the table does not exist or lacks what this version of the store
// reads and writes (the seq column and the key table of migration 0002, for
// instance), naming what is missing, and nil when it is ready. Other errors
// are returned as they are. outbox.Outbox.Start calls it once.
func (s *Store) CheckSchema(ctx context.Context, db core.DBTX) error {
	return schemacheck.Check(ctx, db, s.schemaTarget(false))
}

// schemaTarget is what schemacheck needs of the table; position: for
// position delivery.
func (s *Store) schemaTarget(position bool) schemacheck.Target {
	return schemacheck.Target{
		Position: position, PosTable: s.PosTable(),
		Table: s.Table(), KeyTable: s.KeyTable(),
		Quote: func(id string) string { return `"` + id + `"` },
		// SQLite reports these as generic errors; only the message tells.
		Undefined: func(err error) bool {
			msg := err.Error()
			return strings.Contains(msg, "no such table") || strings.Contains(msg, "no such column")
		},
	}
}
