package mysql

import (
	"context"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/internal/schemacheck"
)

var _ core.SchemaChecker = (*Store)(nil)

// Server error numbers of what does not exist.
const (
	errBadDB        = 1049 // ER_BAD_DB_ERROR: the schema of a qualified table
	errBadFieldName = 1054 // ER_BAD_FIELD_ERROR
	errNoSuchTable  = 1146 // ER_NO_SUCH_TABLE
)

// CheckSchema implements core.SchemaChecker: it returns a *core.SchemaError
// when the table does not exist or lacks what this version of the store
// reads and writes (the seq column and the key table of migration 0002, for
// instance), naming what is missing, and nil when it is ready. Other errors,
// such as a server that does not answer, are returned as they are.
// outbox.Outbox.Start calls it once.
func (s *Store) CheckSchema(ctx context.Context, db core.DBTX) error {
	return schemacheck.Check(ctx, db, s.schemaTarget(false))
}

// schemaTarget is what schemacheck needs of the table; position: for
// position delivery.
func (s *Store) schemaTarget(position bool) schemacheck.Target {
	return schemacheck.Target{
		Position: position, PosTable: s.PosTable(),
		Table: s.Table(), KeyTable: s.KeyTable(), Quote: quote,
		Undefined: func(err error) bool {
			switch errorNumber(err) {
			case errBadDB, errBadFieldName, errNoSuchTable:
				return true
			}
			return false
		},
	}
}
