// Package outbox wires the transactional outbox in one call: a core.Writer
// whose hook feeds the dispatcher's hot queue, a dispatch.Dispatcher, a
// poller.Poller and optionally a purge.Purger, all on one outbox table,
// started and stopped together.
//
//	ob, err := outbox.New(outbox.Config{DB: db, Store: store, Registry: reg})
//	if err != nil {
//		return err
//	}
//	if err := ob.Start(context.WithoutCancel(ctx)); err != nil {
//		return err
//	}
//	defer ob.Close(context.Background()) // poller, then dispatcher, then purger
//
//	err = ob.Do(ctx, func(ctx context.Context) error {
//		// ... the business change, on the transaction txctx.From(ctx) ...
//		_, err := ob.Writer().Write(ctx, env) // same transaction; delivered after COMMIT
//		return err
//	})
//
// Nothing here is more than wiring: every component keeps its own package,
// configuration and documentation, Config.Dispatch, Config.Poller and
// Config.Purge are the components' own Config structs (their zero fields
// take the components' defaults), and Writer, Dispatcher, Poller, Purger and
// TxManager return the components for direct use. A program that needs a
// different arrangement builds the components itself; see the package
// documentation of dispatch for the wiring Outbox does.
//
// # Modes
//
// Config.Mode says how many processes share the table, and switches on what
// several processes need:
//
//	                           SingleNode  MultiNode           MultiNode+SingleActive  WriterOnly
//	Writer (hot-path hook)     yes         yes                 yes (every instance)    yes, no hook
//	Dispatcher                 yes         yes                 yes (every instance)    no
//	Poller claims              yes         every instance      the active one only     no
//	lease owner                as given    made unique         made unique             -
//	Purger (Config.Purge)      unlocked    one at a time       one at a time           one at a time
//	relay lock connection      -           -                   1 per instance          -
//	PostgreSQL wake-up         LISTEN      LISTEN              LISTEN (every instance) NOTIFY only
//
// SingleNode (the default) is one process using its table: nothing in it
// coordinates with other processes. MultiNode is for several processes on
// one table (MultiNode instances, and WriterOnly processes): a lease owner
// unique per process (New appends a random suffix to an explicit
// Dispatch.Owner, so that a value from shared configuration cannot
// collide), and a purge that runs on one instance at a time: each run takes
// the table's purge lock (core.Locker: pg_try_advisory_lock on PostgreSQL,
// GET_LOCK on MySQL and MariaDB) and is skipped when another instance holds
// it. WriterOnly runs only the Writer, without a hook, for processes whose
// events another process (a MultiNode Outbox, or change data capture)
// delivers; its purger, if any, takes the purge lock too. SQLite has no
// named locks (one process owns the file): its purge runs unlocked, which is
// safe, and SingleActive is refused. The lease (Dispatch.LeaseTimeout, renewed
// while an event is held) means the same in every mode: even one instance
// reclaims its own expired leases.
//
// # Single-active relay
//
// With Config.SingleActive (MultiNode only), one instance per table is the
// active one: it holds the table's relay lock, a session-level advisory lock
// (GET_LOCK on MySQL and MariaDB) on one dedicated connection of Config.DB,
// and only its poller claims. The others stand by: their pollers claim
// nothing, and every SingleActiveInterval (1 s by default) they try the
// lock. The active instance checks its lock connection as often and stands
// by as soon as the check fails, so an instance that lost its connection
// stops claiming. When the active process dies its session ends, the lock
// is free, and a standby takes it at its next try and polls at once, so it
// takes over within about one interval (docs/reliability.md#single-active-takeover has the
// takeover times measured after kill -9).
//
// The hot path stays on in every instance: an event written through Do is
// leased by the instance that wrote it, so that instance delivers it, active
// or not, without waiting for a poll. What goes to the active instance is
// everything the pollers claim: events written without the hot path
// (Writer.WriteTx on a plain *sql.Tx, WriterOnly processes), retries, events
// a full hot queue refused, and the events of a crashed instance once their
// lease expires. Use it when one claimer is what you want, e.g. to keep the
// table's claim traffic to one instance, or for listeners that should not
// run concurrently across instances for polled events.
//
// The lock makes one claimer the normal state; it does not carry
// correctness. Between the loss of the active instance's session and its
// next check, a standby may already hold the lock, so two instances may
// claim for up to about two intervals; the leases, fenced by owner, keep
// that safe as they keep any number of claimers safe. The lock's connection
// counts against the pool's SetMaxOpenConns. A host that vanishes without
// closing its connections holds the lock until the server drops the session
// (TCP keepalive, or MySQL's wait_timeout).
//
// # Several nodes on one database
//
// Running the same service on several nodes needs MultiNode and nothing
// else, because the components already share the table safely:
//
//   - The poller always claims with a lease (owner token and time); two
//     pollers, in one process or several, never hold the same event at once,
//     and every write-back is fenced by the owner token, so a node whose lease
//     expired cannot overwrite the outcome recorded by the node that took the
//     event over.
//   - Events written through Do (or any txctx transaction) are inserted
//     already leased by the writing node's dispatcher, so other nodes'
//     pollers leave them alone while the hot path delivers them. That is why
//     Poller.SkipRecent can stay 0 on every node.
//   - A node's own retries and the events its full hot queue refused wake
//     its own poller when they fall due, so the poll interval does not delay
//     them.
//
// What it does not give: delivery stays at-least-once (listeners deduplicate
// on the event id), and events of aggregate types the store does not order
// (its Config.Ordered) have no order between them, within a node or across
// nodes. Events held by a node that crashed are claimed by another
// node only once their lease expires (dispatch.Config.LeaseTimeout, 30
// seconds by default; a live node renews the leases it holds, so with the
// SQL stores the lease need not exceed a delivery). Events written without
// a txctx transaction (Writer.WriteTx with a plain *sql.Tx) or by WriterOnly
// processes are delivered by whichever poller claims them first (the active
// one under SingleActive), within Poller.Interval (5 s by default). With N
// nodes the table sees N polls per interval (one claiming poll under
// SingleActive); raise Interval if that matters more than latency for those
// events.
//
// # Shutdown
//
// Close stops the poller first, so that it stops feeding the dispatcher,
// then lets the dispatcher drain for up to Dispatch.DrainTimeout (events it
// does not deliver stay in the table, their leases released), then stops
// the purger, and returns when no goroutine is left. An HTTP service shuts
// its server down first (http.Server.Shutdown), so that requests still
// writing events are delivered through the hot path, and closes the Outbox
// after it.
package outbox
