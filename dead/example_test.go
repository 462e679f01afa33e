package dead_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/dead"
	"github.com/outboxkit/outbox/store/sqlite"
)

// A Manager over a SQLite outbox: list the dead events of one type, replay
// one, then replay the rest in batches.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-dead-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "outbox.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlite.New(sqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateSchema(ctx, db); err != nil {
		log.Fatal(err)
	}
	killThree(ctx, store, db) // three events whose listener gave up

	m, err := dead.New(dead.Config{DB: db, Store: store})
	if err != nil {
		log.Fatal(err)
	}
	events, err := m.List(ctx, core.DeadFilter{EventType: "OrderPlaced"})
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range events {
		fmt.Println(ev.ID(), ev.Status, ev.Attempts, ev.LastError)
	}

	ok, err := m.Replay(ctx, "evt-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("replayed evt-1:", ok)

	n, err := m.ReplayAll(ctx, core.DeadFilter{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	left, err := m.Count(ctx, core.DeadFilter{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("replayed the rest:", n, "dead left:", left)
	// Output:
	// evt-1 DEAD 1 payment service unavailable
	// evt-2 DEAD 1 payment service unavailable
	// evt-3 DEAD 1 payment service unavailable
	// replayed evt-1: true
	// replayed the rest: 2 dead left: 0
}

// killThree writes three events and records them as DEAD, as the dispatcher
// does when a listener fails for good.
func killThree(ctx context.Context, store *sqlite.Store, db core.DBTX) {
	at := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	for i := 1; i <= 3; i++ {
		env, err := core.NewEnvelope(core.EnvelopeSpec{ID: fmt.Sprintf("evt-%d", i),
			Type: core.EventName("OrderPlaced"), OccurredAt: at.Add(time.Duration(i) * time.Second),
			JSON: []byte(`{"order":42}`)})
		if err != nil {
			log.Fatal(err)
		}
		opts := core.InsertOptions{LeaseOwner: "example", LeaseAt: time.Now()}
		if err := store.Insert(ctx, db, []core.Envelope{env}, opts); err != nil {
			log.Fatal(err)
		}
		if _, err := store.MarkDead(ctx, db, "example", env.ID(), time.Now(), "payment service unavailable"); err != nil {
			log.Fatal(err)
		}
	}
}
