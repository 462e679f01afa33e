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
package core
