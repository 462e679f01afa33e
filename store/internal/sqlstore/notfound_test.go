package sqlstore

import (
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/outboxkit/outbox/core"
)

// TestNotFoundMatchesBoth: Get's missing-row error matches the store-neutral
// core.ErrNotFound and still sql.ErrNoRows, which callers matched before.
func TestNotFoundMatchesBoth(t *testing.T) {
	err := fmt.Errorf("get event x: %w", notFound{})
	if !errors.Is(err, core.ErrNotFound) || !errors.Is(err, sql.ErrNoRows) {
		t.Errorf("%v: matches ErrNotFound %v, sql.ErrNoRows %v", err, errors.Is(err, core.ErrNotFound), errors.Is(err, sql.ErrNoRows))
	}
}
