package mysql_test

import (
	"testing"

	"github.com/outboxkit/outbox/core"

	"github.com/outboxkit/outbox/store/internal/sqlgolden"
	"github.com/outboxkit/outbox/store/mysql"
)

// TestGoldenSQL: testdata/*.sql hold the statements this store runs, for
// review; go test -update rewrites them. So are the files goose and
// golang-migrate apply, in migrations/goose and migrations/golang-migrate,
// rendered from migrations/templates for the default table. The files of ClaimSkipLocked, the
// default, cover every operation; those of ClaimUpdateLimit (suffix
// "-update-limit") the two that differ: the claim and the DDL.
func TestGoldenSQL(t *testing.T) {
	for _, claim := range []mysql.ClaimStrategy{mysql.ClaimSkipLocked, mysql.ClaimUpdateLimit} {
		st, err := mysql.New(mysql.Config{Claim: claim})
		if err != nil {
			t.Fatal(err)
		}
		if claim == mysql.ClaimSkipLocked {
			sqlgolden.Check(t, st, "")
			sqlgolden.CheckMigrations(t, st)
		} else {
			sqlgolden.Check(t, st, "-"+claim.String(), "claim", "ddl")
		}
	}
}

// TestGoldenOrderedSQL: testdata/ordered.sql holds the statements of ordered
// delivery, for a store that orders the aggregate type "Order".
func TestGoldenOrderedSQL(t *testing.T) {
	st, err := mysql.New(mysql.Config{Ordered: core.Ordering{"Order": core.DeadBlocks}})
	if err != nil {
		t.Fatal(err)
	}
	sqlgolden.Check(t, st, "", "ordered")
}
