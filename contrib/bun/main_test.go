package outboxbun_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test closes its outbox and pools: no goroutine may outlive them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
