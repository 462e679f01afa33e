package mysql_test

import (
	"testing"

	"github.com/outboxkit/outbox/store/internal/sqlgolden"
	"github.com/outboxkit/outbox/store/mysql"
)

// TestGoldenSQL: testdata/*.sql hold the statements this store runs, for
// review; go test -update rewrites them. The files of ClaimSkipLocked, the
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
		} else {
			sqlgolden.Check(t, st, "-"+claim.String(), "claim", "ddl")
		}
	}
}
