package sqlite_test

import (
	"testing"
	"time"

	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/internal/upgradetest"
	"github.com/outboxkit/outbox/store/sqlite"
	"github.com/outboxkit/outbox/store/storetest"
)

// TestUpgradeAddsOrdering: CreateSchema upgrades a table of the previous
// release (made by schema.sql alone) to ordered delivery, idempotently.
func TestUpgradeAddsOrdering(t *testing.T) {
	t.Parallel()
	tg := testdb.Open(t, "sqlite")
	st, err := sqlite.New(sqlite.Config{Table: testdb.UniqueName("outbox_up"), Ordered: storetest.Ordering})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testdb.DropTable(t.Context(), tg.DB, st) })
	upgradetest.Check(t, tg.DB, sqlite.LegacyDDL(st), st, st.Table(), func(t time.Time) any { return t.Format("2006-01-02T15:04:05.000000Z") })
}
