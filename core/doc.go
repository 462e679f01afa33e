// Package core is the vocabulary of the outbox: the event envelope an application
// writes, the stored event a listener receives, the listener registry, the retry
// policy, the metrics and interceptor hooks, the Store and Purger service-provider
// interfaces that every database dialect implements, and the Writer that inserts
// envelopes inside the caller's transaction.
//
// core imports no database driver, no store and no dispatcher: stores, the
// dispatcher, the poller and the operations packages build on it, never the
// other way round.
//
// A typical write, inside a business transaction carried by the context (see
// package txctx), looks like:
//
//	env, err := core.NewEnvelope(core.EnvelopeSpec{
//		Type:          OrderPlaced,
//		AggregateType: Orders,
//		AggregateID:   order.ID,
//		JSON:          payload,
//	})
//	if err != nil {
//		return err
//	}
//	_, err = writer.Write(ctx, env)
//
// Delivery is at-least-once; Envelope.ID (the event_id column) is the key
// consumers deduplicate on.
//
// # Optional capabilities
//
// A store, a listener, a Metrics, a WriterHook, a database handle or the
// poller's handler may offer more than the interface it is handed as. The library
// finds each extra capability by type assertion, for a store with StoreAs
// (which looks through a wrapper that implements StoreUnwrapper; the
// migrations.Migrator asserts on its Source itself), and works without it,
// unless the last column says it is required. This is every one of them:
//
//	capability                 on              implemented by              used by
//	BatchMarker                Store           postgres, mysql, sqlite     dispatch: DONE outcomes in batches, else one MarkDone per event
//	DoneDeleter                Store           postgres, mysql, sqlite     dispatch: Config.DeleteDelivered, which requires it
//	LeaseRenewer               Store           postgres, mysql, sqlite     dispatch: renews the leases of held events, else none
//	OrderedStore               Store           postgres, mysql, sqlite     Writer, dispatch, dead: per-key order (the store's Ordered config)
//	Inspector                  Store           postgres, mysql, sqlite     console, metrics/prometheus sampler (requires it), outboxctl
//	Locker                     Store           postgres, mysql             purge: one purger at a time; outbox: SingleActive (requires
//	                                                                       it), MultiNode purge; migrations.Migrator
//	SchemaChecker              Store           postgres, mysql, sqlite     outbox.Start: refuses a missing or older table (SchemaError)
//	InsertNotifier             Store           postgres                    Writer: pg_notify for events no hot path delivers
//	WakeSource                 Store           postgres                    poller: LISTEN, a poll at once when others commit events
//	purge.KeyPurger            Store           postgres, mysql, sqlite     purge: deletes idle key rows of ordered delivery
//	purge.PartitionMaintainer  Store           postgres                    purge: creates and drops partitions (Config.Partitions)
//	store.SchemaManager        Store           postgres, mysql, sqlite     outboxctl, bench, test suites: table name, DDL, CreateSchema
//	migrations.Source          Store           postgres, mysql, sqlite     migrations.Migrator (requires it): versioned migrations
//	migrations.ExistsReporter  Source          mysql, sqlite               migrations.Migrator: skips an ADD already applied
//	position.Source            Store           postgres, mysql (MariaDB),  outbox: Config.Delivery = DeliveryPosition (requires it);
//	(internal, unexported                      sqlite                      a store outside the module cannot offer it
//	method)
//	StoreUnwrapper             Store           wrappers (outboxotel)       StoreAs: the wrapped store's capabilities stay visible
//	AsyncListener              Listener        the broker publishers       dispatch: Workers left zero runs the largest InFlight
//	BatchListener              Listener        the JetStream and Kafka     dispatch: a worker hands it the queued events together
//	                                           publishers
//	LatencyMetrics             Metrics         metrics/prometheus,         dispatch, poller: duration histograms
//	                                           outboxotel
//	LeasingHook                WriterHook      the dispatcher's hook       Writer: inserts events leased by the hook's owner
//	TxBeginner                 DBTX            *sql.DB, *sql.Conn,         the stores: a claim or an ordered write in a transaction of its own
//	                                           *sqlx.DB
//	Conner                     DBTX            *sql.DB, *sqlx.DB           Locker, WakeSource: a dedicated connection
//	poller.OwnerSource,        poller.Handler  *dispatch.Dispatcher        poller.New: the owner token, the lease timeout, wake-ups
//	LeaseTimeoutSource,                                                    for retries and released events
//	DueFromNotifier,
//	DueNotifier
//
// postgres, mysql and sqlite are the stores of store/postgres, store/mysql
// and store/sqlite; a type that embeds one of them has its capabilities.
package core
