package main

import (
	"context"
	"os"
	"testing"
	"time"
)

// TestRun runs the sample against the NATS server of OUTBOX_NATS_URL; run
// fails unless every order is billed exactly once.
func TestRun(t *testing.T) {
	url := os.Getenv("OUTBOX_NATS_URL")
	if url == "" {
		if os.Getenv("OUTBOX_REQUIRE_DBS") == "1" {
			t.Fatal("natsinbox sample: set OUTBOX_NATS_URL=nats://127.0.0.1:4222 to run")
		}
		t.Skip("natsinbox sample: set OUTBOX_NATS_URL=nats://127.0.0.1:4222 to run")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, url, 5, os.Stdout); err != nil {
		t.Fatal(err)
	}
}
