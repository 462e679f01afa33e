package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := `1. five events died. List them, oldest first
   $ outboxctl --dsn sqlite://DB dead list
   evt-1  PaymentCaptured  attempts=3  ledger service: 503 unavailable
   evt-2  OrderShipped     attempts=1  outbox: no listener for event: aggregate type "Order", event type "OrderShipped"
   evt-3  PaymentCaptured  attempts=3  ledger service: 503 unavailable
   evt-4  OrderShipped     attempts=1  outbox: no listener for event: aggregate type "Order", event type "OrderShipped"
   evt-5  PaymentCaptured  attempts=3  ledger service: 503 unavailable
2. count them by type
   $ outboxctl --dsn sqlite://DB dead count --type T
   PaymentCaptured  3
   OrderShipped     2
3. the ledger service is back; replay one event and check it
   $ outboxctl --dsn sqlite://DB dead replay evt-1 --yes
   replayed evt-1: true
   evt-1 is now DONE (attempts counted afresh: 0)
   replaying evt-1 again: false (it is not DEAD any more)
4. deploy the missing OrderShipped listener, then replay all the rest, in batches of 2
   $ outboxctl --dsn sqlite://DB dead replay-all --batch 2 --yes
   progress: 2
   progress: 4
   replayed: 4
   dead events left: 0
5. purge delivered rows (retention shortened for the demo; the default is 7 days)
   $ outboxctl --dsn sqlite://DB purge --older-than 1ns --keep-dead --yes
   deleted: 5
`
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
}
