package sqlite_test

import (
	"testing"

	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, testdb.Conformance("sqlite", mysql.Config{}))
}
