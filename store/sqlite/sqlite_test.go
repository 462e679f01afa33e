package sqlite_test

import (
	"testing"

	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/internal/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, testdb.SQLite)
}
