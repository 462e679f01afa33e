package sqlite_test

import (
	"testing"

	"github.com/outboxkit/outbox/store/internal/sqlgolden"
	"github.com/outboxkit/outbox/store/sqlite"
)

// TestGoldenSQL: testdata/*.sql hold the statements this store runs, for
// review; go test -update rewrites them.
func TestGoldenSQL(t *testing.T) {
	st, err := sqlite.New(sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	sqlgolden.Check(t, st, "")
}
