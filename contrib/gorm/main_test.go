package outboxgorm_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes its outbox and pools: no goroutine may outlive them.
// GORM's prepared-statement cache (PrepareStmt) starts a goroutine that
// nothing stops, by GORM's own account; it is GORM's, not the outbox's.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("gorm.io/gorm/internal/lru.NewLRU[...].func1"))
}
