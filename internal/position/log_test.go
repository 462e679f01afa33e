package position_test

import (
	"testing"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/store/sqlite"
)

// unwrapping is a wrapper that hides the store's methods but unwraps to it.
type unwrapping struct{ core.Store }

func (w unwrapping) Unwrap() core.Store { return w.Store }

// TestLogOf: the stores' position log, unexported, is found on the store
// itself, on a type that embeds it and through a wrapper that unwraps to it.
func TestLogOf(t *testing.T) {
	st, err := sqlite.New(sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	type embedding struct{ *sqlite.Store }
	for name, s := range map[string]core.Store{
		"store":     st,
		"embedding": embedding{st},
		"wrapper":   unwrapping{st},
	} {
		if position.LogOf(s) == nil {
			t.Errorf("%s: no position log", name)
		}
	}
	if lg := position.LogOf(unwrapping{}); lg != nil {
		t.Errorf("a wrapper of nothing has a position log: %T", lg)
	}
}
