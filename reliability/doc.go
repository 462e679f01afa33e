// Package reliability holds the outbox's fault-injection suite: tests that
// crash worker processes, cut database connections, feed poison events,
// overflow the hot queue, let leases expire (or renew them) under slow
// listeners, fail write-backs, and throw bad input at the public API, on
// SQLite, PostgreSQL and MySQL/MariaDB (see internal/testsupport/testdb for
// the servers). They prove the delivery guarantees (atomicity, no loss,
// after-commit only, safe claims, fencing, no head-of-line blocking, bounded
// memory, clean shutdown, clear errors for bad input) under failure and log
// the figures docs/reliability.md reports.
//
// The package has no API. By default its tests run a short version sized for
// CI; OUTBOX_CHAOS=long runs the long one (see docs/reliability.md and
// `make chaos`); `make stress` repeats the lease and write-back tests.
package reliability
