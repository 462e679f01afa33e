package outbox_test

import (
	"context"
	"fmt"
	"log"
	"sync"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
)

// forwarder delivers events in batches, as a broker client that sends many
// messages and then waits for their acknowledgements would. Handle serves
// the deliveries the dispatcher makes one at a time (with interceptors).
type forwarder struct {
	mu   sync.Mutex
	sent []string
	done chan struct{} // closed once want events were sent
	want int
}

func (f *forwarder) MaxBatch() int { return 100 }

func (f *forwarder) HandleBatch(_ context.Context, evs []core.Event) []error {
	errs := make([]error, len(evs)) // one outcome per event: nil is DONE
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range evs {
		f.sent = append(f.sent, string(ev.Payload()))
	}
	if len(f.sent) == f.want {
		close(f.done)
	}
	return errs
}

func (f *forwarder) Handle(ctx context.Context, ev core.Event) error {
	return f.HandleBatch(ctx, []core.Event{ev})[0]
}

// A listener that takes batches (core.BatchListener) gets the events queued
// for it together: here, the ten events of one transaction, delivered after
// its COMMIT in one call or a few.
func Example_batchListener() {
	ctx := context.Background()
	db, store, cleanup := openExample()
	defer cleanup()
	f := &forwarder{done: make(chan struct{}), want: 10}
	reg := core.NewRegistry()
	if err := reg.RegisterFallback(f); err != nil {
		log.Fatal(err)
	}
	ob, err := outbox.New(outbox.Config{DB: db, Store: store, Registry: reg})
	if err != nil {
		log.Fatal(err)
	}
	if err := ob.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer ob.Close(ctx)

	err = ob.Do(ctx, func(ctx context.Context) error {
		for i := range 10 {
			env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("Shipped"),
				JSON: fmt.Appendf(nil, `{"parcel":%d}`, i)})
			if err != nil {
				return err
			}
			if _, err := ob.Writer().Write(ctx, env); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	<-f.done
	fmt.Println("sent:", len(f.sent))
	// Output:
	// sent: 10
}
