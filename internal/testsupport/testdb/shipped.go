package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/outboxkit/outbox/store/migrations"
)

// CreateShippedSchema makes st's table as the first released schema made
// it: migration 0001 of the store, which is what CreateSchema ran before
// later versions were added. Upgrade tests start from it.
func CreateShippedSchema(ctx context.Context, db *sql.DB, st migrations.Source) error {
	ms := st.Migrations()
	if len(ms) == 0 {
		return fmt.Errorf("%s has no migrations", st.Table())
	}
	for _, stmt := range strings.Split(ms[0].Up, ";\n") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("shipped schema of %s: %w", st.Table(), err)
		}
	}
	return nil
}

// InsertShippedRow writes a NEW event with id into a table of the shipped
// schema, with the columns that schema has, as a release of that time did.
func InsertShippedRow(ctx context.Context, db *sql.DB, dialect, table, id string) error {
	q := "INSERT INTO " + table + " (event_id, event_type, payload, available_at, created_at) VALUES (?, ?, ?, ?, ?)"
	if dialect == "postgres" {
		q = "INSERT INTO " + table + " (event_id, event_type, payload, available_at, created_at) VALUES ($1, $2, $3, $4, $5)"
	}
	var now any = time.Now().UTC().Truncate(time.Microsecond)
	if dialect == "sqlite" {
		now = now.(time.Time).Format("2006-01-02T15:04:05.000000Z") // the SQLite store's text format
	}
	_, err := db.ExecContext(ctx, q, id, "Shipped", []byte(`{}`), now, now)
	return err
}

func stripComments(stmt string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(stmt, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
