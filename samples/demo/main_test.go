package main

import (
	"context"
	"testing"
	"time"
)

// TestDemo runs the demo, which fails unless every step did what it says:
// in particular the burst of step 4 must overflow the hot queue.
func TestDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx); err != nil {
		t.Fatal(err)
	}
}
