package purge_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/purge"
	"github.com/outboxkit/outbox/store/sqlite"
)

// RunOnce for cron-style use: delete what finished more than a week ago,
// keeping DEAD rows for an operator.
func ExamplePurger_RunOnce() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-purge-example")
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
	// Three events delivered 8, 9 and 1 days ago, one that died 30 days ago.
	now := time.Now()
	for i, ago := range []int{8, 9, 1, 30} {
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: core.EventName("OrderPlaced"), JSON: []byte(`{}`)})
		if err != nil {
			log.Fatal(err)
		}
		if err := store.Insert(ctx, db, []core.Envelope{env}, core.InsertOptions{LeaseOwner: "me", LeaseAt: now}); err != nil {
			log.Fatal(err)
		}
		at := now.Add(-time.Duration(ago) * 24 * time.Hour)
		if i == 3 {
			_, err = store.MarkDead(ctx, db, "me", env.ID(), at, "no listener")
		} else {
			_, err = store.MarkDone(ctx, db, "me", env.ID(), at)
		}
		if err != nil {
			log.Fatal(err)
		}
	}

	p, err := purge.New(purge.Config{Store: store, DB: db, KeepDead: true})
	if err != nil {
		log.Fatal(err)
	}
	n, err := p.RunOnce(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted:", n)
	// Output: deleted: 2
}
