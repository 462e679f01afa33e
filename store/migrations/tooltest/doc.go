// Package tooltest applies the outbox's migrations with goose and
// golang-migrate against the real databases, and holds the examples of the
// "Using with goose" and "Using with golang-migrate" pages. It is a module
// of its own so that neither tool becomes a dependency of the outbox
// module: a user of the core packages never downloads them.
package tooltest
