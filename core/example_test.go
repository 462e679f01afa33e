package core_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/outboxkit/outbox/core"
)

// Event and aggregate types are usually Go string enums with a Name method.
type UserEvent string

func (e UserEvent) Name() string { return string(e) }

const UserCreated UserEvent = "UserCreated"

func ExampleNewEnvelope() {
	env, err := core.NewEnvelope(core.EnvelopeSpec{
		Type:          UserCreated,
		AggregateType: core.AggregateName("User"),
		AggregateID:   "u-42",
		Headers:       map[string]string{"source": "signup"},
		JSON:          []byte(`{"email":"ada@example.com"}`),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(env.Type(), env.AggregateType(), env.AggregateID(), string(env.Payload()))

	_, err = core.NewEnvelope(core.EnvelopeSpec{Type: UserCreated})
	fmt.Println(err, errors.Is(err, core.ErrInvalid))
	// Output:
	// UserCreated User u-42 {"email":"ada@example.com"}
	// outbox: invalid payload: neither JSON nor Bytes is set; set exactly one true
}

func ExampleRegistry() {
	var reg core.Registry
	_ = reg.RegisterFunc(core.AggregateName("User"), UserCreated, func(ctx context.Context, ev core.Event) error {
		return nil
	})
	err := reg.RegisterFunc(core.AggregateName("User"), UserCreated, func(context.Context, core.Event) error { return nil })
	fmt.Println(err)
	_, ok := reg.Lookup("User", "UserCreated")
	fmt.Println(ok)
	// Output:
	// register (User, UserCreated): outbox: listener already registered
	// true
}

// A listener decides its outcome with the error it returns.
func ExampleRetryAfter() {
	handle := func(ctx context.Context, ev core.Event) error {
		switch ev.Attempts {
		case 0:
			return core.RetryAfter(errors.New("rate limited"), 30e9) // try again in 30 s
		default:
			return core.Permanent(errors.New("malformed payload")) // DEAD now, no retry
		}
	}
	var re *core.RetryError
	var pe *core.PermanentError
	fmt.Println(errors.As(handle(context.Background(), core.Event{}), &re), re.Delay)
	fmt.Println(errors.As(handle(context.Background(), core.Event{Attempts: 1}), &pe))
	// Output:
	// true 30s
	// true
}
