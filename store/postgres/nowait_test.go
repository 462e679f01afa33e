package postgres_test

import (
	"testing"

	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// TestNoWaitLeavesHeldKey: MarkDoneOrderedNoWait finishes the keys whose rows
// it can lock at once and returns the others as held, untouched, without
// waiting for their writers.
func TestNoWaitLeavesHeldKey(t *testing.T) {
	t.Parallel()
	testdb.NoWaitLeavesHeldKey(t, testdb.Postgres(t))
}
