package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/outboxkit/outbox/broker"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// TestServicePublishesToNATS runs the service with -nats against the real
// PostgreSQL and NATS: each order's events are stored in the table's
// stream, one message per event, its id the Nats-Msg-Id, and no e-mail is
// sent in-process.
func TestServicePublishesToNATS(t *testing.T) {
	dsn, url := os.Getenv(testdb.PostgresEnv), os.Getenv("OUTBOX_NATS_URL")
	if dsn == "" || url == "" {
		msg := "httpservice NATS test: set " + testdb.PostgresEnv + "=" + defaultDSN + " and OUTBOX_NATS_URL=nats://127.0.0.1:4222 to run"
		if testdb.Required() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	table := testdb.UniqueName("httpnats")
	t.Cleanup(func() { dropTables(t, dsn, table) })
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	stream := streamName(table)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), stream) })

	c, shutdown := serve(t, "-dsn", dsn, "-addr", "127.0.0.1:0", "-table", table, "-nats", url)
	var want []string // event ids
	var ids []string  // order ids
	for i, cust := range []string{"ada@example.com", "bob@example.com", "cy@example.com"} {
		code, resp := c.do("POST", "/orders", fmt.Sprintf(`{"customer":%q,"total_cents":%d}`, cust, 1000+i))
		if code != http.StatusCreated {
			t.Fatalf("POST /orders: %d %v", code, resp)
		}
		ids, want = append(ids, resp["id"].(string)), append(want, resp["event_id"].(string))
	}
	if code, resp := c.do("POST", "/orders/"+ids[0]+"/cancel", ""); code != http.StatusOK {
		t.Fatalf("cancel: %d %v", code, resp)
	}
	if m := c.waitMetric(`outbox_dispatch_total{result="success"}`, 4); m[`outbox_dispatch_total{result="success"}`] != 4 {
		t.Fatalf("%v deliveries, want 4", m[`outbox_dispatch_total{result="success"}`])
	}
	if code, order := c.do("GET", "/orders/"+ids[0], ""); code != http.StatusOK || fmt.Sprint(order["emails"]) != "[]" {
		t.Errorf("GET /orders/%s: %d %v, want no e-mail sent in-process", ids[0], code, order)
	}
	shutdown()

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, stream, natsjs.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(100)
	if err != nil {
		t.Fatal(err)
	}
	var got, subjects []string
	for msg := range batch.Messages() {
		got = append(got, msg.Headers().Get(nats.MsgIdHdr))
		subjects = append(subjects, msg.Subject())
		if msg.Headers().Get(broker.HeaderAggregateType) != "Order" {
			t.Errorf("message %s: %s header %q", msg.Subject(), broker.HeaderAggregateType, msg.Headers().Get(broker.HeaderAggregateType))
		}
	}
	if err := batch.Error(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 {
		t.Fatalf("%d messages in %s, want 4 (three placed, one cancelled): %v", len(got), stream, subjects)
	}
	for _, id := range want {
		if !slices.Contains(got, id) {
			t.Errorf("no message with Nats-Msg-Id %s (event of an order placed): %v", id, got)
		}
	}
	placed := stream + ".Order.OrderPlaced"
	if n := countOf(subjects, placed); n != 3 || countOf(subjects, stream+".Order.OrderCancelled") != 1 {
		t.Errorf("subjects %v, want 3 on %s and 1 cancelled", subjects, placed)
	}
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
