// Package purge deletes old terminal rows (DONE and DEAD) from the outbox
// table, so that it stays a small buffer rather than an ever-growing archive.
// Archive events in a listener if you need them for audit.
//
// A Purger runs in the background (Start/Close) or once per call (RunOnce,
// for cron-style use). Each run computes its cutoffs once — now minus
// Config.Retention for DONE rows, now minus Config.DeadRetention for DEAD rows
// — and deletes in batches of Config.BatchSize until a batch comes back short.
// Every batch is its own short statement on the pool with its own
// Config.QueryTimeout, so no run holds locks for long and an interrupted run
// loses nothing: the next one picks up where it stopped.
//
// Rows that are NEW or RETRY are never touched, whatever their age; a row's
// age is measured from done_at, the time it became terminal.
//
// Several instances running a Purger on one table set Config.Locker (the
// store's core.Locker; outbox.New does it in MultiNode and WriterOnly
// modes): each run then takes a database lock of the table first
// (pg_try_advisory_lock on PostgreSQL, GET_LOCK on MySQL and MariaDB) on a
// dedicated connection, holds it to its last batch, and is skipped when another instance's run
// holds it, so one instance purges at a time and the jittered intervals make
// them take turns. SQLite has no such lock: one process owns the file.
//
// On a partitioned table (store/postgres with Config.Partitions, which
// implements PartitionMaintainer) each run first creates the partitions
// the coming writes need and drops every time partition whose rows would
// all be deleted (DONE before the cutoff; DEAD before it, unless KeepDead;
// no NEW, RETRY or WAITING row), then deletes the old rows of the others
// in batches as above. A drop is one short statement however many rows the
// partition holds; the rows of dropped partitions are not counted in what
// RunOnce returns. A failed maintenance (a lock timeout on a busy table)
// does not stop the row batches; the run returns its error after them.
//
// DEAD rows wait for an operator (see package dead), so they may deserve a
// longer retention than DONE rows: set Config.DeadRetention, or
// Config.KeepDead to keep them until someone replays or deletes them.
//
//	p, err := purge.New(purge.Config{Store: store, DB: db, Logger: log})
//	if err != nil {
//		return err
//	}
//	if err := p.Start(ctx); err != nil {
//		return err
//	}
//	defer p.Close(context.Background())
package purge
