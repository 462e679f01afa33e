package sqlite_test

import (
	"testing"

	"github.com/outboxkit/outbox/core"

	"github.com/outboxkit/outbox/store/internal/sqlgolden"
	"github.com/outboxkit/outbox/store/sqlite"
)

// TestGoldenSQL: testdata/*.sql hold the statements this store runs, for
// review; go test -update rewrites them. So are the files goose and
// golang-migrate apply, in migrations/goose and migrations/golang-migrate,
// rendered from migrations/templates for the default table.
func TestGoldenSQL(t *testing.T) {
	st, err := sqlite.New(sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sqlgolden.Check(t, st, "")
	sqlgolden.CheckMigrations(t, st)
}

// TestGoldenOrderedSQL: testdata/ordered.sql holds the statements of ordered
// delivery, for a store that orders the aggregate type "Order".
func TestGoldenOrderedSQL(t *testing.T) {
	st, err := sqlite.New(sqlite.Config{Ordered: core.Ordering{"Order": core.DeadBlocks}})
	if err != nil {
		t.Fatal(err)
	}
	sqlgolden.Check(t, st, "", "ordered")
}
