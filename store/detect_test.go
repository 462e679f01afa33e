package store_test

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"
	sqlitedrv "modernc.org/sqlite"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
)

// wrapped hides a driver's type, as instrumentation wrappers do, so that
// Detect must ask the server.
type wrapped struct{ driver.Driver }

func init() {
	sql.Register("wrapped-pgx", wrapped{stdlib.GetDefaultDriver()})
	sql.Register("wrapped-mysql", wrapped{&mysqldrv.MySQLDriver{}})
	sql.Register("wrapped-sqlite", wrapped{&sqlitedrv.Driver{}})
	sql.Register("nodb", wrapped{noDB{}})
}

func TestDetect(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, env string
		dsn       func(t *testing.T) string
		want      func(core.Store) bool
	}{
		{"sqlite", "", func(t *testing.T) string { return filepath.Join(t.TempDir(), "detect.db") },
			func(s core.Store) bool { _, ok := s.(*sqlite.Store); return ok }},
		{"pgx", testdb.PostgresEnv, nil, func(s core.Store) bool { _, ok := s.(*postgres.Store); return ok }},
		{"mysql", testdb.MySQLEnv, nil, func(s core.Store) bool {
			m, ok := s.(*mysql.Store)
			// MariaDB 10.6+ and MySQL 8 get SKIP LOCKED.
			return ok && m.ClaimStrategy() == mysql.ClaimSkipLocked
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var dsn string
			if tc.env != "" {
				if dsn = os.Getenv(tc.env); dsn == "" {
					if testdb.Required() {
						t.Fatalf("set %s", tc.env)
					}
					t.Skipf("set %s to run", tc.env)
				}
			} else {
				dsn = tc.dsn(t)
			}
			for _, drv := range []string{tc.name, "wrapped-" + tc.name} {
				db, err := sql.Open(drv, dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				st, err := store.Detect(db, "detected")
				if err != nil {
					t.Fatalf("%s: %v", drv, err)
				}
				if !tc.want(st) {
					t.Errorf("%s: detected %T", drv, st)
				}
				if _, err := store.Detect(db, "bad name"); !errors.Is(err, core.ErrInvalid) {
					t.Errorf("%s: bad table name: err = %v", drv, err)
				}
			}
		})
	}
}

func TestDetectUnknown(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("nodb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := store.Detect(db, "")
	if !errors.Is(err, store.ErrUnknownDatabase) || st != nil {
		t.Fatalf("Detect = %v, %v; want nil, ErrUnknownDatabase", st, err)
	}
	if !strings.Contains(err.Error(), "store_test.wrapped") {
		t.Errorf("error does not name the driver type: %v", err)
	}
}

// noDB is a driver whose connections know no SQL at all.
type noDB struct{}

func (noDB) Open(string) (driver.Conn, error) { return noConn{}, nil }

type noConn struct{}

func (noConn) Prepare(q string) (driver.Stmt, error) { return nil, errors.New("nodb: cannot run " + q) }
func (noConn) Close() error                          { return nil }
func (noConn) Begin() (driver.Tx, error)             { return nil, errors.New("nodb: no transactions") }
