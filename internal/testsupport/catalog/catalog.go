// Package catalog reads what a database's catalog says about one table
// (columns with their types, nullability, defaults and collations; indexes
// with their columns, uniqueness and predicates) as lines of text in which
// the table's name is replaced by T, so that two tables made by different
// means (CreateSchema, a migration tool) compare with ==. The lines are
// sorted: the order of the columns is not compared, since a migration's
// ALTER TABLE ... ADD COLUMN appends where CreateSchema may put the column
// elsewhere.
package catalog

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
)

// Of returns the catalog lines of table (unqualified, in the connection's
// current schema or database) on dialect "postgres", "mysql" or "sqlite". A
// table that does not exist has no lines.
func Of(ctx context.Context, db *sql.DB, dialect, table string) ([]string, error) {
	var queries []string
	switch dialect {
	case "postgres":
		queries = []string{
			`SELECT 'column ' || column_name || ' ' || data_type || ' len=' || COALESCE(character_maximum_length::text, '-') ||
			  ' null=' || is_nullable || ' default=' || COALESCE(column_default, '-') || ' collation=' || COALESCE(collation_name, '-')
			 FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`,
			`SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename = $1`,
			`SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(c.oid) FROM pg_constraint c
			 JOIN pg_class r ON r.oid = c.conrelid WHERE r.relname = $1 AND r.relnamespace = current_schema()::regnamespace`,
		}
	case "mysql":
		queries = []string{
			`SELECT CONCAT('table engine=', engine, ' collation=', table_collation) FROM information_schema.tables
			 WHERE table_schema = DATABASE() AND table_name = ?`,
			`SELECT CONCAT('column ', column_name, ' ', column_type, ' null=', is_nullable, ' default=', COALESCE(column_default, '-'),
			  ' extra=', extra, ' generated=', COALESCE(generation_expression, '-'), ' collation=', COALESCE(collation_name, '-'))
			 FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ? ORDER BY ordinal_position`,
			`SELECT CONCAT('index ', index_name, ' ', seq_in_index, ' ', column_name, ' non_unique=', non_unique)
			 FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ?`,
		}
	case "sqlite":
		queries = []string{
			`SELECT 'column ' || name || ' ' || type || ' notnull=' || "notnull" || ' default=' || COALESCE(dflt_value, '-') || ' pk=' || pk
			 FROM pragma_table_info(?) ORDER BY cid`,
			`SELECT 'index ' || name || ' ' || COALESCE(sql, 'auto') FROM sqlite_master WHERE type = 'index' AND tbl_name = ?`,
		}
	default:
		return nil, fmt.Errorf("catalog: unknown dialect %q", dialect)
	}
	var out []string
	for _, q := range queries {
		rows, err := db.QueryContext(ctx, q, table)
		if err != nil {
			return nil, fmt.Errorf("catalog of %s: %w", table, err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				rows.Close()
				return nil, fmt.Errorf("catalog of %s: %w", table, err)
			}
			out = append(out, normalize(line, table))
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("catalog of %s: %w", table, err)
		}
	}
	slices.Sort(out)
	return out, nil
}

// normalize writes the table's name as T and folds runs of blanks, which
// SQLite keeps from the CREATE statement's text.
func normalize(line, table string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(line, table, "T")), " ")
}

// Diff returns the lines only in a and only in b, for a test failure.
func Diff(a, b []string) string {
	var sb strings.Builder
	for _, l := range a {
		if !slices.Contains(b, l) {
			fmt.Fprintf(&sb, "- %s\n", l)
		}
	}
	for _, l := range b {
		if !slices.Contains(a, l) {
			fmt.Fprintf(&sb, "+ %s\n", l)
		}
	}
	return sb.String()
}
