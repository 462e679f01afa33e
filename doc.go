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
// SingleNode (the default) runs everything in this process. WriterOnly runs
// only the Writer, without a hook, for processes that write events which
// another process (a delivering Outbox, or change data capture) delivers.
// MultiNode is for several processes delivering from one table.
//
// # Several nodes on one database
//
// Running the same service on several nodes needs no other configuration
// than one node does, because the components already share the table
// safely:
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
// What several nodes do need is a distinct lease owner per process: two
// processes with the same owner could write back each other's claims. The
// default owner (hostname-pid-random) is unique; in MultiNode mode New also
// appends a random suffix to an explicit Dispatch.Owner, so that a value
// from shared configuration cannot collide. That is the only difference
// between the SingleNode and MultiNode wiring.
//
// What it does not give: delivery stays at-least-once (listeners deduplicate
// on the event id), and there is no ordering between events, within a node
// or across nodes. Events held by a node that crashed are claimed by another
// node only once their lease expires (dispatch.Config.LeaseTimeout, 30
// seconds by default; a live node renews the leases it holds, so with the
// SQL stores the lease need not exceed a delivery). Events written without a txctx transaction (Writer.WriteTx with
// a plain *sql.Tx) or by WriterOnly processes are delivered by whichever
// poller claims them first, within Poller.Interval (5 s by default). With N
// nodes the table sees N polls per interval; raise Interval if that matters
// more than latency for those events. The purger may run on every node: its
// runs are jittered and concurrent deletes remove each row once.
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
