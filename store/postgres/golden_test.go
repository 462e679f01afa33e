package postgres_test

import (
	"testing"

	"github.com/outboxkit/outbox/store/internal/sqlgolden"
	"github.com/outboxkit/outbox/store/postgres"
)

// TestGoldenSQL: testdata/*.sql hold the statements this store runs, for
// review; go test -update rewrites them.
func TestGoldenSQL(t *testing.T) {
	st, err := postgres.New(postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sqlgolden.Check(t, st, "")
}
