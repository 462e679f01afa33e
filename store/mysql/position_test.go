package mysql_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/position"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/mysql"
)

// TestPositionCheck: on MariaDB the position log's check passes on a table
// CreateSchema made, and names the sequence when it is missing.
func TestPositionCheck(t *testing.T) {
	t.Parallel()
	tg := testdb.MySQL(t)
	ctx := context.Background()
	st := tg.Store.(*mysql.Store)
	lg := position.LogOf(st)
	if lg == nil {
		t.Fatal("no position log")
	}
	if err := lg.CheckSchema(ctx, tg.DB); err != nil {
		t.Fatalf("check of a table CreateSchema made: %v", err)
	}
	seq := st.Table() + "_pos_seq"
	if _, err := tg.DB.ExecContext(ctx, "DROP SEQUENCE `"+seq+"`"); err != nil {
		t.Fatal(err)
	}
	err := lg.CheckSchema(ctx, tg.DB)
	if !errors.Is(err, core.ErrSchema) || !strings.Contains(err.Error(), "sequence "+seq) {
		t.Fatalf("check without the sequence: %v, want a schema error naming it", err)
	}
	// CreateSchema adds it again.
	if err := st.CreateSchema(ctx, tg.DB); err != nil {
		t.Fatal(err)
	}
	if err := lg.CheckSchema(ctx, tg.DB); err != nil {
		t.Fatalf("check after CreateSchema: %v", err)
	}
}
