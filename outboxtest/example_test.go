package outboxtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/outboxtest"
	"github.com/outboxkit/outbox/txctx"
)

// The code under test: it places an order and writes its event in the
// transaction its context carries.

type orderEvent string

func (e orderEvent) Name() string { return string(e) }

const (
	Order        = core.AggregateName("Order")
	OrderPlaced  = orderEvent("OrderPlaced")
	OrderShipped = orderEvent("OrderShipped")
)

type Shop struct{ Writer *core.Writer }

func (s *Shop) PlaceOrder(ctx context.Context, id string) error {
	tx, _ := txctx.From(ctx)
	if _, err := tx.ExecContext(ctx, `INSERT INTO orders (id) VALUES (?)`, id); err != nil {
		return err
	}
	env, err := core.NewEnvelope(core.EnvelopeSpec{Type: OrderPlaced, AggregateType: Order, AggregateID: id,
		JSON: []byte(`{"id":"` + id + `"}`)})
	if err != nil {
		return err
	}
	_, err = s.Writer.Write(ctx, env)
	return err
}

// In a test, t is the *testing.T; examples have none, so this one stands in.
func Example() {
	t := newExampleT()
	defer t.finish()
	ctx := context.Background()

	h := outboxtest.New(t, outboxtest.Config{})
	if _, err := h.DB.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		t.Fatalf("%v", err)
	}
	shop := &Shop{Writer: h.Writer}

	// What did PlaceOrder write in its transaction?
	if err := h.Do(ctx, func(ctx context.Context) error { return shop.PlaceOrder(ctx, "o-1") }); err != nil {
		t.Fatalf("%v", err)
	}
	h.AssertWritten(t, OrderPlaced)               // passes
	h.AssertWritten(t, OrderPlaced, OrderShipped) // reports an error on t

	// Run the listener, here and now.
	var emails []string
	_ = h.Registry.RegisterFunc(Order, OrderPlaced, func(ctx context.Context, ev core.Event) error {
		emails = append(emails, "confirmation for "+ev.AggregateID())
		return nil
	})
	delivered, failed, err := h.DeliverAll(ctx)
	fmt.Println("delivered:", delivered, "failed:", failed, "err:", err)
	fmt.Println("emails:", emails)
	fmt.Println("status:", h.Written()[0].Status)
	// Output:
	// t.Errorf: outboxtest: events written: [OrderPlaced], want [OrderPlaced OrderShipped]
	// delivered: 1 failed: 0 err: <nil>
	// emails: [confirmation for o-1]
	// status: DONE
}

// A failing listener is retried when the Harness's clock reaches the retry
// time, and goes DEAD after MaxAttempts failures.
func ExampleHarness_DeliverAll() {
	t := newExampleT()
	defer t.finish()
	ctx := context.Background()
	h := outboxtest.New(t, outboxtest.Config{MaxAttempts: 3})

	attempts := 0
	_ = h.Registry.RegisterFunc(Order, OrderPlaced, func(ctx context.Context, ev core.Event) error {
		attempts++
		return errors.New("mail server down")
	})
	var id string
	err := h.Do(ctx, func(ctx context.Context) error {
		env, err := core.NewEnvelope(core.EnvelopeSpec{Type: OrderPlaced, AggregateType: Order, JSON: []byte(`{}`)})
		if err != nil {
			return err
		}
		id, err = h.Writer.Write(ctx, env)
		return err
	})
	if err != nil {
		t.Fatalf("%v", err)
	}

	for range 4 {
		delivered, failed, err := h.DeliverAll(ctx)
		ev := h.Event(id)
		fmt.Printf("delivered %d, failed %d, err %v: %s after %d attempts\n", delivered, failed, err, ev.Status, ev.Attempts)
		h.Advance(time.Minute) // past the backoff of the next retry
	}
	fmt.Println("listener ran", attempts, "times; last error:", h.Event(id).LastError)
	// Output:
	// delivered 0, failed 1, err <nil>: RETRY after 1 attempts
	// delivered 0, failed 1, err <nil>: RETRY after 2 attempts
	// delivered 0, failed 1, err <nil>: DEAD after 3 attempts
	// delivered 0, failed 0, err <nil>: DEAD after 3 attempts
	// listener ran 3 times; last error: mail server down
}

// exampleT stands in for *testing.T in examples.
type exampleT struct{ cleanups []func() }

func newExampleT() *exampleT { return &exampleT{} }

func (t *exampleT) Helper()          {}
func (t *exampleT) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) TempDir() string {
	dir, err := os.MkdirTemp("", "outboxtest-example")
	if err != nil {
		panic(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}
func (t *exampleT) Errorf(format string, args ...any) { fmt.Printf("t.Errorf: "+format+"\n", args...) }
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (t *exampleT) finish() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
}
