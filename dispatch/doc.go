// Package dispatch delivers outbox events to their listeners.
//
// A Dispatcher holds two bounded in-memory queues. The hot queue is fed right
// after a business transaction commits, by the hook returned from
// Dispatcher.WriterHook, so a committed event reaches its listener without a
// database round trip. The cold queue is fed by a poller (package poller),
// which claims what the hot path did not deliver: overflow, events of crashed
// or other instances, retries and delayed events. A pool of workers drains
// both queues, hot twice as often as cold while both have work, runs the one
// listener registered for the event's (aggregate type, event type), and
// records the outcome:
//
//   - success: DONE;
//   - no listener: DEAD at once (core.ErrUnroutable), never retried;
//   - failure: RETRY after the retry policy's delay (or the delay of a
//     core.RetryAfter error), or DEAD when the error is core.Permanent or the
//     event has failed Config.MaxAttempts times;
//   - a listener panic is a failure whose error carries the panic value.
//
// Every write-back is fenced by the event's lease owner, so a dispatcher that
// lost its lease cannot overwrite the outcome recorded by the new owner.
//
// # Lease renewal
//
// When the store implements core.LeaseRenewer (the SQL stores do, also
// through a wrapper with Unwrap), the dispatcher renews the lease of every
// event it holds (queued, being delivered, or with an outcome being written)
// every Config.LeaseTimeout/3, one statement per owner, so that a listener
// slower than the lease causes no second delivery on any number of
// instances, and the lease (30 s by default) only decides how soon the
// events of a crashed instance are claimed again. A renewal that finds a
// lease lost (another owner took the row) cancels that delivery's listener
// context (context.Cause reports the lost lease) and writes no outcome for
// it. Without the capability (a custom store) there is no renewal, and a
// delivery that outlives its lease may be delivered again elsewhere.
//
// # Write-backs
//
// A store error while writing an outcome is not a listener failure: it is
// logged and counted (Metrics.StoreError), and no attempt is charged. Every
// write-back (DONE, batched or not, RETRY and DEAD), through a wrapped store
// or not, is tried again with backoff from 100 ms to 10 s for as long as the
// event stays held by this dispatcher, which keeps renewing its lease
// meanwhile; so a failed write-back never causes another delivery by
// itself. Leases the dispatcher gives back (events the hot queue refused,
// deliveries interrupted by shutdown) are released with the same backoff.
// Close makes one last attempt; what still fails is left leased, and is
// delivered again once its lease expires.
//
// When the store implements core.BatchMarker (the SQL stores do), DONE
// outcomes are written in batches: one UPDATE for up to
// Config.DoneBatchSize delivered events, written when the batch is full or
// Config.DoneBatchLinger after its first event, so that marking events done
// does not add one commit per event to the database's write load. An event
// stays in flight until its DONE is written. RETRY and DEAD outcomes, rare by
// nature, are written one by one.
//
// # Wiring
//
// Writer, Dispatcher and Poller share one lease owner token and one lease
// duration (Config.LeaseTimeout; the poller takes both from the dispatcher):
//
//	d, err := dispatch.New(dispatch.Config{Store: st, DB: db, Registry: reg})
//	w, err := core.NewWriter(core.WriterConfig{Store: st, Hook: d.WriterHook()})
//	p, err := poller.New(poller.Config{Store: st, DB: db, Handler: d}) // Owner, LeaseTimeout from d
//	d.Start(ctx); p.Start(ctx)
//	defer d.Close(ctx) // runs second: the poller stops feeding first
//	defer p.Close(ctx)
//
// A poller is required: failed events wait in the database as RETRY and only
// a poller claims them when they fall due, and events the hot queue refused
// or that carry a future NotBefore are left to it too. To keep short retry
// delays short, the dispatcher reports each due time through NotifyDueFrom,
// with the creation time of the oldest event concerned, and poller.New
// subscribes the poller's WakeAtFrom there: a retry due in 200 ms is claimed
// after about 200 ms rather than at the next poll interval, by a claim that
// starts from the event's creation time rather than from the oldest row.
//
// # Shutdown
//
// Close (or cancelling Start's context) stops intake, lets the workers drain
// the queues for up to Config.DrainTimeout, then cancels the contexts of
// listeners still running and waits for them, writes the last batch of
// DONE outcomes and makes the last attempt at the write-backs still failing
// (leases renewed until then). A listener interrupted that way
// is not charged an attempt: its lease is released. Events still queued have
// their leases released too, so another instance can claim them at once.
// Close returns when no goroutine of the dispatcher is left.
//
// # Design notes
//
// docs/design/dispatcher.md gives the invariants the dispatcher and its
// in-flight tracker keep, the alternatives measured before they took this
// shape, and the tests that guard them; docs/design/leases.md does the same
// for fencing, lease renewal and write-backs.
package dispatch

// Where each concept lives:
//
//	dispatcher.go  the Dispatcher type, New, Start, Close and the shutdown
//	               stages (run by internal/lifecycle.Staged), due-time callbacks
//	inflight.go    what is held: the tracker's entries and their states,
//	               stale-claim tombstones, and intake
//	queues.go      the hot and cold queues: offers, capacity, the fair next
//	worker.go      a worker's loop: take, deliver, record
//	deliver.go     interceptors and the listener, panics recovered
//	record.go      from a delivery's result to its outcome (or a release)
//	writeback.go   the one write-back path: first attempt, retries, last try
//	done.go        the DONE batcher
//	renew.go       lease renewal of every held event
//	release.go     leases whose release failed (internal/lease.Releaser)
//	hook.go        the writer hook that feeds the hot queue
//	config.go      Config, its defaults and validation
