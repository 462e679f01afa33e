// Package store picks the outbox store for a database handle: Detect looks at
// the handle's driver (pgx, go-sql-driver/mysql or modernc.org/sqlite) and
// returns the matching store from store/postgres, store/mysql or
// store/sqlite. Open is its companion for a connection string: it opens a
// pool on any DSN that postgres.Open, mysql.Open or sqlite.Open takes (the
// forms are listed on Open), so that a tool given a DSN needs neither.
// SchemaManager names what each of those stores is besides a core.Store: a
// store that creates its own table, for tools that work with any of them.
//
// Importing this package links all three stores and their drivers into the
// program. A program that uses one database should import that store package
// directly (store/postgres, store/mysql or store/sqlite) and call its New.
package store
