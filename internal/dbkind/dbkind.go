// Package dbkind tells which database a database/sql handle talks to, from
// its driver's type alone: the one detection that store.Detect and inbox
// share. It names the drivers' packages instead of importing them, so that a
// package using it (the inbox, which the broker consumers import) does not
// compile pgx, go-sql-driver/mysql and modernc.org/sqlite into a program
// that uses none of them.
package dbkind

import (
	"database/sql"
	"database/sql/driver"
	"fmt"
	"reflect"
)

// Kind is a database's SQL flavour; the zero Kind is unknown.
type Kind string

// The kinds the library supports.
const (
	Unknown  Kind = ""
	Postgres Kind = "postgres"
	MySQL    Kind = "mysql"
	SQLite   Kind = "sqlite"
)

// drivers maps a driver's type, as "package path.TypeName" of the type its
// pointer points to, to its kind: pgx's stdlib driver, go-sql-driver/mysql
// and modernc.org/sqlite, the drivers the stores are tested on.
var drivers = map[string]Kind{
	"github.com/jackc/pgx/v5/stdlib.Driver":                 Postgres,
	"github.com/outboxkit/outbox/store/postgres.lazyDriver": Postgres, // Open's
	"github.com/go-sql-driver/mysql.MySQLDriver":            MySQL,
	"modernc.org/sqlite.Driver":                             SQLite,
}

// OfDriver returns the kind of d, Unknown for a driver it does not know (a
// driver that wraps one of the three, for instance).
func OfDriver(d driver.Driver) Kind {
	return drivers[TypeName(d)]
}

// Of returns the kind of db's driver (see OfDriver).
func Of(db *sql.DB) Kind { return OfDriver(db.Driver()) }

// TypeName returns the package path and name of d's type, without the
// pointer: "github.com/jackc/pgx/v5/stdlib.Driver" for pgx's *stdlib.Driver.
// A type without a name (or a nil driver) gives its %T form.
func TypeName(d driver.Driver) string {
	t := reflect.TypeOf(d)
	if t == nil {
		return "<nil>"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Name() == "" || t.PkgPath() == "" {
		return fmt.Sprintf("%T", d)
	}
	return t.PkgPath() + "." + t.Name()
}
