package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/outboxkit/outbox/core"
)

// KeyTable returns the table of the per-key counters of ordered delivery,
// schema-qualified when it has a schema.
func (s *Store) KeyTable() string { return s.table.KeyTable().String() }

// SchemaSQL returns the DDL that creates the table and its indexes, then the
// statements that add ordered delivery to it (UpgradeOrderingSQL) and
// position delivery, for migration tools.
func (s *Store) SchemaSQL() string {
	stmts := SplitStatements(RenderDDL(s.d.DDL, s.table, s.d.Quote))
	stmts = append(stmts, SplitStatements(RenderDDL(s.d.UpgradeOrdering, s.table, s.d.Quote))...)
	stmts = append(stmts, SplitStatements(RenderDDL(s.d.UpgradePosition, s.table, s.d.Quote))...)
	return strings.Join(stmts, ";\n\n") + ";\n"
}

// UpgradeOrderingSQL returns the statements that add ordered delivery (the
// seq column, its index and the key table) to a table created by an earlier
// release's DDL.
func (s *Store) UpgradeOrderingSQL() string {
	return strings.Join(SplitStatements(RenderDDL(s.d.UpgradeOrdering, s.table, s.d.Quote)), ";\n\n") + ";\n"
}

// CreateSchema creates the table and its indexes if they do not exist, and
// adds ordered and position delivery to a table that lacks them. Running it again, on a
// table it made or on one of an earlier release, is harmless.
func (s *Store) CreateSchema(ctx context.Context, db core.DBTX) error {
	if s.d.DDL == "" {
		return fmt.Errorf("create schema: dialect %s has no DDL", s.d.Name)
	}
	for _, stmt := range SplitStatements(RenderDDL(s.d.DDL, s.table, s.d.Quote)) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("create schema: %w", err)
		}
	}
	for _, stmt := range SplitStatements(RenderDDL(s.d.UpgradeOrdering, s.table, s.d.Quote)) {
		if _, err := db.ExecContext(ctx, stmt); err != nil && !s.d.IsAlreadyExists(err) {
			return fmt.Errorf("create schema: add ordered delivery: %w", err)
		}
	}
	for _, stmt := range SplitStatements(RenderDDL(s.d.UpgradePosition, s.table, s.d.Quote)) {
		if _, err := db.ExecContext(ctx, stmt); err != nil && !s.d.IsAlreadyExists(err) {
			return fmt.Errorf("create schema: add position delivery: %w", err)
		}
	}
	if s.d.AfterSchema != nil {
		return s.d.AfterSchema(ctx, db)
	}
	return nil
}

// BaseDDL returns the statements of the dialect's DDL alone, without the
// ordered-delivery upgrade: what CreateSchema ran before ordered delivery
// existed, for the upgrade tests.
func (s *Store) BaseDDL() []string { return SplitStatements(RenderDDL(s.d.DDL, s.table, s.d.Quote)) }
