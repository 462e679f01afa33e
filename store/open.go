package store

import (
	"database/sql"

	"github.com/outboxkit/outbox/core"
	dsnpkg "github.com/outboxkit/outbox/internal/dsn"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
)

// Open opens a database/sql pool on dsn with the driver its form names, by
// calling postgres.Open, mysql.Open or sqlite.Open, which take the same
// strings:
//
//	postgres://user:pass@host:5432/db?sslmode=disable   PostgreSQL (also postgresql://,
//	host=host user=user dbname=db sslmode=disable        and pgx's keyword/value form)
//	user:pass@tcp(host:3306)/db                          MySQL, MariaDB, TiDB (go-sql-driver/mysql's
//	mysql://user:pass@tcp(host:3306)/db                  form, alone or behind mysql://)
//	sqlite:///abs/path.db, sqlite://rel.db,              SQLite (a plain path too)
//	file:path.db, path.db
//
// A DSN in none of these forms is refused with an error matching
// core.ErrInvalid that lists them; what each Open checks without
// connecting is in its documentation. Open does not connect; Detect, on
// the returned pool, gives the store of the database.
func Open(dsn string) (*sql.DB, error) {
	d, err := dsnpkg.Parse(dsn)
	if err != nil {
		return nil, core.Invalid("dsn", "%v", err)
	}
	switch d.Dialect {
	case dsnpkg.Postgres:
		return postgres.Open(dsn)
	case dsnpkg.MySQL:
		return mysql.Open(dsn)
	}
	return sqlite.Open(dsn)
}
