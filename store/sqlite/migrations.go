package sqlite

import (
	"embed"

	"github.com/outboxkit/outbox/store/internal/sqlstore"
	"github.com/outboxkit/outbox/store/migrations"
)

// The versioned migrations of the table, as templates; the package
// documentation of store/migrations says how to add one.
//
//go:embed migrations/templates/*.sql
var migrationFiles embed.FS

var migrationTemplates = sqlstore.MustParseMigrations(migrationFiles, "migrations/templates")

var (
	_ migrations.Source         = (*Store)(nil)
	_ migrations.ExistsReporter = (*Store)(nil)
)

// AlreadyExists reports whether err says that a column or index a migration
// adds exists already (migrations.ExistsReporter): this database has no IF
// NOT EXISTS for them, and a table CreateSchema made has them.
func (s *Store) AlreadyExists(err error) bool { return isDuplicateColumn(err) }

// Migrations returns the versioned migrations of the store's table, oldest
// first, rendered for its name: what migrations.Goose and
// migrations.GolangMigrate give goose and golang-migrate. After the last one
// the table is what CreateSchema makes.
func (s *Store) Migrations() []migrations.Migration {
	return s.shared.Migrations()
}
