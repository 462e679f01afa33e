package dbkind_test

import (
	"database/sql"
	"database/sql/driver"
	"testing"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"
	sqlitedrv "modernc.org/sqlite"

	"github.com/outboxkit/outbox/internal/dbkind"
)

// otherDriver is a driver dbkind does not know.
type otherDriver struct{}

func (otherDriver) Open(string) (driver.Conn, error) { return nil, driver.ErrBadConn }

// The kinds come from the real drivers' types: a driver that renames or
// moves its type fails here, not in a user's program.
func TestOfDriver(t *testing.T) {
	for _, tc := range []struct {
		drv  driver.Driver
		want dbkind.Kind
	}{
		{&stdlib.Driver{}, dbkind.Postgres},
		{&mysqldrv.MySQLDriver{}, dbkind.MySQL},
		{&sqlitedrv.Driver{}, dbkind.SQLite},
		{otherDriver{}, dbkind.Unknown},
		{&otherDriver{}, dbkind.Unknown},
		{nil, dbkind.Unknown},
	} {
		if got := dbkind.OfDriver(tc.drv); got != tc.want {
			t.Errorf("OfDriver(%s) = %q, want %q", dbkind.TypeName(tc.drv), got, tc.want)
		}
	}
}

// Of reads the driver of an opened handle, registered under any name.
func TestOf(t *testing.T) {
	for name, want := range map[string]dbkind.Kind{"pgx": dbkind.Postgres, "mysql": dbkind.MySQL, "sqlite": dbkind.SQLite} {
		db, err := sql.Open(name, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := dbkind.Of(db); got != want {
			t.Errorf("Of(sql.Open(%q)) = %q, want %q", name, got, want)
		}
		db.Close()
	}
}

func TestTypeName(t *testing.T) {
	if got, want := dbkind.TypeName(&stdlib.Driver{}), "github.com/jackc/pgx/v5/stdlib.Driver"; got != want {
		t.Errorf("TypeName = %q, want %q", got, want)
	}
	if got, want := dbkind.TypeName(otherDriver{}), "github.com/outboxkit/outbox/internal/dbkind_test.otherDriver"; got != want {
		t.Errorf("TypeName = %q, want %q", got, want)
	}
}
