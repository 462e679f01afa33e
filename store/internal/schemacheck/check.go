// Package schemacheck tells whether an outbox table is in the shape the
// stores of this module read and write (core.SchemaChecker): it selects no
// rows from each column and table they use, and names what is missing.
package schemacheck

import (
	"context"
	"strings"

	"github.com/outboxkit/outbox/core"
)

// Version is the schema version of the stores' tables: the number of their
// migrations (store/<dialect>/migrations/templates). The stores' tests
// check that it is, so that a new migration makes Check look for what it
// adds.
const Version = 3

// ClaimVersion is the schema version the claim path needs: a table at it
// works in the default delivery mode; position delivery needs Version.
const ClaimVersion = 2

// Target is one store's table, and what Check needs of its dialect.
type Target struct {
	Table    string // as the store's Table returns it: unquoted, schema-qualified when it has a schema
	KeyTable string // as the store's KeyTable returns it
	// Quote quotes a table name for the dialect. Column names go
	// unquoted: they are plain lowercase words, and SQLite reads a
	// double-quoted name it does not find as a string, which would hide a
	// missing column.
	Quote func(string) string
	// Undefined reports whether err says that a table, column or schema
	// does not exist.
	Undefined func(err error) bool
	// Position: the table is used for position delivery, which needs
	// Version (the pos column and the position table); else ClaimVersion.
	Position bool
	PosTable string // as the store's PosTable returns it; with Position
}

// v1Columns are the columns of migration 0001, the table itself.
var v1Columns = []string{"event_id", "event_type", "aggregate_type", "aggregate_id", "tenant_id", "payload", "headers",
	"status", "attempts", "available_at", "created_at", "done_at", "last_error", "locked_by", "locked_at"}

// Check returns nil when t's table has what the store expects, a
// *core.SchemaError naming what it lacks, or the error of a query that
// failed for another reason (the server does not answer).
func Check(ctx context.Context, db core.DBTX, t Target) error {
	qt, kt := quoted(t.Table, t.Quote), quoted(t.KeyTable, t.Quote)
	// missing reports whether SELECT cols FROM table fails because
	// something does not exist.
	missing := func(table string, cols ...string) (bool, error) {
		rows, err := db.QueryContext(ctx, "SELECT "+strings.Join(cols, ", ")+" FROM "+table+" WHERE 1 = 0")
		if err != nil {
			if t.Undefined(err) {
				return true, nil
			}
			return false, err
		}
		_ = rows.Close()
		return false, rows.Err()
	}
	// each returns the "column c" of cols that table lacks.
	each := func(table string, cols []string) ([]string, error) {
		var out []string
		for _, c := range cols {
			m, err := missing(table, c)
			if err != nil {
				return nil, err
			}
			if m {
				out = append(out, "column "+c)
			}
		}
		return out, nil
	}
	want := ClaimVersion
	if t.Position {
		want = Version
	}
	schemaErr := &core.SchemaError{Table: t.Table, Want: want}

	// Version 0: no table.
	if m, err := missing(qt, "1"); err != nil || m {
		if err != nil {
			return err
		}
		return schemaErr
	}
	schemaErr.Exists = true
	// Version 1: the table of migration 0001.
	if m, err := missing(qt, v1Columns...); err != nil || m {
		if err != nil {
			return err
		}
		if schemaErr.Missing, err = each(qt, v1Columns); err != nil {
			return err
		}
		return schemaErr
	}
	schemaErr.Version = 1
	// Version 2: ordered delivery, migration 0002: the seq column and the
	// key table.
	seq, err := each(qt, []string{"seq"})
	if err != nil {
		return err
	}
	schemaErr.Missing = seq
	keyCols := []string{"aggregate_type", "aggregate_id", "last_seq", "done_seq", "updated_at"}
	if m, err := missing(kt, keyCols...); err != nil {
		return err
	} else if m {
		schemaErr.Missing = append(schemaErr.Missing, "table "+t.KeyTable)
	}
	if len(schemaErr.Missing) > 0 {
		return schemaErr
	}
	if !t.Position {
		return nil
	}
	schemaErr.Version = 2
	// Version 3: position delivery, migration 0003: the pos column and the
	// position table.
	if schemaErr.Missing, err = each(qt, []string{"pos"}); err != nil {
		return err
	}
	posCols := []string{"relay", "floor_pos", "cursor_pos", "open_pos", "owner", "updated_at"}
	if m, err := missing(quoted(t.PosTable, t.Quote), posCols...); err != nil {
		return err
	} else if m {
		schemaErr.Missing = append(schemaErr.Missing, "table "+t.PosTable)
	}
	if len(schemaErr.Missing) > 0 {
		return schemaErr
	}
	return nil
}

// quoted quotes a table name that may be schema-qualified.
func quoted(name string, q func(string) string) string {
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = q(p)
	}
	return strings.Join(parts, ".")
}
