// Package migrations is the versioned schema of the outbox table: the
// migrations of each store, rendered for its table, in the formats goose and
// golang-migrate read, and a small Migrator that applies them with a version
// table of its own (what outboxctl migrate runs).
//
// # Where the files live
//
// Each dialect keeps its migrations next to its store, as templates that name
// the table {{table}} and its indexes {{index:SUFFIX}}:
//
//	store/postgres/migrations/templates/0001_create_table.up.sql
//	store/postgres/migrations/templates/0001_create_table.down.sql
//
// and the same under store/mysql and store/sqlite. Rendered for the default
// table (outbox_event), they are also on disk in each tool's own layout, so
// that a tool's command line can apply them as they are:
//
//	store/<dialect>/migrations/goose/0001_create_table.sql           (-- +goose Up/Down)
//	store/<dialect>/migrations/golang-migrate/0001_create_table.up.sql
//	store/<dialect>/migrations/golang-migrate/0001_create_table.down.sql
//
// Those are generated: go test ./store/... -update rewrites them, and the
// stores' tests fail when they differ from the templates.
//
// Adding a schema change is adding one file pair per dialect,
// NNNN_name.up.sql and NNNN_name.down.sql in templates/, numbered after the
// last one, then running go test ./store/... -update. The store's DDL
// (schema.sql, what CreateSchema runs) is changed in the same commit to the
// schema after the new migration: a test applies every migration and
// compares the catalog (columns, types, indexes) with what CreateSchema
// makes. Migration 0001 is the schema CreateSchema made before versioned
// migrations existed, written with IF NOT EXISTS, so that a table
// CreateSchema made is brought under a tool's control by applying 0001 (it
// changes nothing and records version 1).
//
// # Other table names
//
// Files on disk can only carry the default table name. For another one, ask
// the store: Goose(store) and GolangMigrate(store) return the migrations of
// the store's table as an fs.FS in each tool's layout, ready for
// goose.NewProvider or golang-migrate's iofs source; outboxctl migrate files
// writes the same files to a directory for a tool's command line.
//
// Keep the outbox's migrations in a set of their own, with their own version
// table (goose: WithTableName or -table; golang-migrate: MigrationsTable or
// x-migrations-table), so that their numbers never mix with the
// application's migrations.
package migrations
