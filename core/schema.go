package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// SchemaChecker is the optional capability of a Store that can tell whether
// its table is in the shape it reads and writes: created, and migrated to
// the schema version the store expects. The stores of this module implement
// it; outbox.Outbox.Start calls it once, through StoreAs, so that a missing
// or old table is an error at start instead of a poller error every second.
type SchemaChecker interface {
	// CheckSchema returns nil when the table is ready, a *SchemaError when
	// it is missing or older than the store expects, and any other error
	// (the database does not answer, a permission is missing) as it is.
	CheckSchema(ctx context.Context, db DBTX) error
}

// ErrSchema is matched by every *SchemaError: an outbox table that is
// missing or at an older schema version than its store expects.
var ErrSchema = errors.New("outbox: table not ready")

// SchemaError is an outbox table that is missing or older than its store
// expects. It matches ErrSchema, and its text names the table and the ways
// to create or migrate it.
type SchemaError struct {
	Table   string   // the table, schema-qualified when it has a schema
	Exists  bool     // whether a table of that name exists
	Version int      // the schema version the table has; 0 when it does not exist or is not an outbox table
	Want    int      // the schema version the store expects
	Missing []string // what the store needs and does not find, e.g. "column seq"
}

func (e *SchemaError) Error() string {
	if e.Exists && e.Version == 0 {
		return fmt.Sprintf("outbox: table %s exists but is not an outbox table (missing: %s): check the table "+
			"name (Config.Table) and the database the DSN names", e.Table, strings.Join(e.Missing, ", "))
	}
	if !e.Exists {
		return fmt.Sprintf("outbox: table %s does not exist: create it with Store.CreateSchema(ctx, db), "+
			"with \"outboxctl migrate up\", or with the store's migrations in goose or golang-migrate "+
			"(package store/migrations, \"outboxctl migrate files\"); check the table name (Config.Table) "+
			"and the database the DSN names", e.Table)
	}
	return fmt.Sprintf("outbox: table %s is at schema version %d, the store expects %d (missing: %s): "+
		"migrate it with \"outboxctl migrate up\", with Store.CreateSchema(ctx, db), which adds what is missing, "+
		"or by applying the migrations after %04d with your migration tool (package store/migrations)",
		e.Table, e.Version, e.Want, strings.Join(e.Missing, ", "), e.Version)
}

// Is reports whether target is ErrSchema.
func (e *SchemaError) Is(target error) bool { return target == ErrSchema }
