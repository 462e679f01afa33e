// Package sqlstore is the SQL shared by every outbox store. Each statement is
// written once here; a Dialect declares only what really differs between
// databases: bind markers, identifier quoting, time encoding, the claim shape,
// whether UPDATE/DELETE take ORDER BY ... LIMIT, and how driver errors read.
//
// The public stores (store/sqlite, store/postgres, store/mysql) embed *Store
// and add their DDL.
package sqlstore
