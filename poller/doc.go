// Package poller claims outbox events that the hot path did not deliver and
// hands them to the dispatcher's cold queue.
//
// It is the safety net of the outbox: events the hot queue refused, events of
// a crashed process whose lease expired, events written without an
// after-commit hook, retries that have fallen due and events whose NotBefore
// has passed are all delivered through it. Running a Poller is therefore
// required wherever a dispatch.Dispatcher runs.
//
// Every poll claims with a lease (core.Store.Claim): concurrent pollers, in
// this process or others, never hold the same event at once, and the lease
// owner fences the dispatcher's write-backs. A poll first asks the handler
// how much it can take and claims no more than that; events the handler
// still refuses have their leases released at once instead of waiting for
// them to expire. Rows that cannot be decoded are marked DEAD.
//
// Polls run every Config.Interval, at once again while a backlog drains (a
// poll that filled its batch is followed by another), after Wake, and at the
// times passed to WakeAt and WakeAtFrom, which the dispatcher calls when a
// retry falls due and when it releases events it did not deliver.
// A failed claim (the database is down, say) is logged and retried with a
// back-off that grows up to the interval; the loop never stops because of it.
//
// # Backlogs and due claims
//
// While claims come back full, each next claim asks for twice as many rows
// (Config.BatchSize up to Config.MaxBatchSize, never more than the handler
// has room for). Every claim starts where the claims before it ended
// (core.ClaimParams.From, the created_at of the newest row they took: the
// cursor) instead of at the oldest pending row, so that it does not step
// again over the rows delivered or held since. On PostgreSQL a delivered row
// leaves dead entries in the pending index until VACUUM, so a claim from the
// oldest row gets slower as a drain goes on; from the cursor it does not.
//
// Rows that become claimable behind the cursor are never skipped: each is
// owed a due claim, kept in one schedule with the time its rows become
// claimable and, where known, the creation time of the oldest of them.
// Retries and events the dispatcher released unsent (reported through
// WakeAtFrom), events the handler refused, and rows released late are
// claimed from there: such a claim steps over the rows delivered since then
// only, which for an event the hot queue refused a moment ago is next to
// none. For the others (expired leases of other instances, rows committed
// late, Wake and WakeAt), a claim from the oldest row is due after a claim
// that came back short, after a wake-up falls due, and once per Interval.
// Claims that start behind the cursor keep, by how far back they start, to
// about a twentieth of the claiming time, which on a vacuumed table means
// at once. docs/design/poller.md has the reasoning and the figures.
//
// # What wakes a poller
//
// Events written where no hot path delivers them (WriteTx on a plain *sql.Tx,
// a writer without a LeasingHook, a WriterOnly process, another instance)
// would wait for the next poll. Two mechanisms shorten that wait:
//
//   - Watch (PostgreSQL). When the store is a core.WakeSource, the poller
//     runs its Watch on a goroutine it owns: one dedicated connection of
//     Config.DB LISTENs on the table's channel, and core.Writer sends
//     pg_notify on it inside the writing transaction, so the signal arrives
//     when, and only if, the rows are committed. Every notification calls
//     Wake, so a burst of commits coalesces into one or two polls. A lost
//     connection is opened again with a back-off from 100 ms to 5 s, and
//     wakes the poller once it is back (events committed meanwhile sent no
//     signal it could receive); polling goes on meanwhile. Close stops the
//     watch and closes its connection. Config.NoWatch turns it off.
//   - Adaptive poll (every database). After a poll that handed events over,
//     the poller polls every Config.BusyInterval (50 ms) for Config.BusyFor
//     (10 s), then returns to Interval. On MySQL/MariaDB and SQLite, which
//     have no NOTIFY, a steady flow of such events is thus delivered within
//     about BusyInterval, while an idle outbox still costs one claim per
//     Interval per instance; the first event after a quiet spell waits for
//     the next poll. docs/benchmarks.md#w4-cross-instance-wake-up has the figures.
//
// Events written through txctx with the dispatcher's hook need neither: they
// are inserted leased by the writing instance, whose hot path delivers them.
package poller
