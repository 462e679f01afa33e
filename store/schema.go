package store

import (
	"context"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
)

// SchemaManager is a core.Store that manages its own table: it names it,
// gives its DDL to migration tools and creates it. Every store of this
// module is one; tools that create tables for any dialect (outboxctl, the
// benchmarks, the test suites) take one.
type SchemaManager interface {
	core.Store
	// Table returns the table the store works on, schema-qualified when it
	// has a schema.
	Table() string
	// SchemaSQL returns the DDL that creates the table and its indexes.
	// Running it twice is harmless.
	SchemaSQL() string
	// CreateSchema creates the table and its indexes if they do not exist.
	CreateSchema(ctx context.Context, db core.DBTX) error
}

var (
	_ SchemaManager = (*postgres.Store)(nil)
	_ SchemaManager = (*mysql.Store)(nil)
	_ SchemaManager = (*sqlite.Store)(nil)
)
