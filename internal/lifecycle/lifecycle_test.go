package lifecycle

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/outboxkit/outbox/core"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStartTwiceAndAfterClose(t *testing.T) {
	var l Loop
	run := func(_ context.Context, stop <-chan struct{}) { <-stop }
	if err := l.Start(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background(), run); !errors.Is(err, core.ErrAlreadyStarted) {
		t.Fatalf("second Start = %v", err)
	}
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background(), run); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
	if !l.Closed() {
		t.Fatal("Closed() = false")
	}
}

func TestCloseWithoutStart(t *testing.T) {
	var l Loop
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background(), func(context.Context, <-chan struct{}) {}); !errors.Is(err, core.ErrClosed) {
		t.Fatalf("Start after Close = %v", err)
	}
}

func TestCancellingStartContextStops(t *testing.T) {
	var l Loop
	ctx, cancel := context.WithCancel(context.Background())
	workDone := make(chan error, 1)
	if err := l.Start(ctx, func(work context.Context, stop <-chan struct{}) {
		<-stop
		workDone <- work.Err() // the step in progress may finish
	}); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-l.Done()
	if err := <-workDone; err != nil {
		t.Fatalf("work context cancelled by Start's ctx: %v", err)
	}
	_ = l.Close(context.Background())
}

func TestCloseCancelsWorkWhenItsContextEnds(t *testing.T) {
	var l Loop
	entered := make(chan struct{})
	if err := l.Start(context.Background(), func(work context.Context, _ <-chan struct{}) {
		close(entered)
		<-work.Done() // a step that ignores stop
	}); err != nil {
		t.Fatal(err)
	}
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Close returned before the goroutine")
	}
}

func TestConcurrentCloses(t *testing.T) {
	for range 100 {
		var l Loop
		if err := l.Start(context.Background(), func(_ context.Context, stop <-chan struct{}) { <-stop }); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { _ = l.Close(context.Background()) })
		}
		wg.Wait()
	}
}
