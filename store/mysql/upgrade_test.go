package mysql_test

import (
	"testing"

	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/internal/upgradetest"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/storetest"
)

// TestUpgradeAddsOrdering: CreateSchema upgrades a table of the previous
// release (made by schema.sql alone) to ordered delivery, idempotently.
func TestUpgradeAddsOrdering(t *testing.T) {
	t.Parallel()
	tg := testdb.Open(t, "mysql")
	st, err := mysql.New(mysql.Config{Table: testdb.UniqueName("outbox_up"), Ordered: storetest.Ordering})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = testdb.DropTable(t.Context(), tg.DB, st) })
	upgradetest.Check(t, tg.DB, mysql.LegacyDDL(st), st, st.Table(), nil)
}
