package mysql_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/mysql"
)

func TestStrategyFor(t *testing.T) {
	t.Parallel()
	for version, want := range map[string]mysql.ClaimStrategy{
		"8.0.36":                     mysql.ClaimSkipLocked,
		"8.4.3":                      mysql.ClaimSkipLocked,
		"8.0.0-dmr":                  mysql.ClaimUpdateLimit,
		"5.7.44-log":                 mysql.ClaimUpdateLimit,
		"10.11.19-MariaDB-0+deb12u1": mysql.ClaimSkipLocked,
		"10.6.0-MariaDB":             mysql.ClaimSkipLocked,
		"10.5.27-MariaDB":            mysql.ClaimUpdateLimit,
		"11.4.2-MariaDB":             mysql.ClaimSkipLocked,
		"8.0.11-TiDB-v7.5.0":         mysql.ClaimUpdateLimit,
		"garbage":                    mysql.ClaimUpdateLimit,
	} {
		if got := mysql.StrategyFor(version); got != want {
			t.Errorf("StrategyFor(%q) = %v, want %v", version, got, want)
		}
	}
}

func TestNewRejectsUnknownStrategy(t *testing.T) {
	t.Parallel()
	if _, err := mysql.New(mysql.Config{Claim: 7}); !errors.Is(err, core.ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
}

func TestOpenChecksDSN(t *testing.T) {
	t.Parallel()
	for _, dsn := range []string{"root@tcp(127.0.0.1:3306)/test?loc=Local", "not a dsn"} {
		if _, err := mysql.Open(dsn); !errors.Is(err, core.ErrInvalid) {
			t.Errorf("Open(%q): err = %v, want ErrInvalid", dsn, err)
		}
	}
	db, err := mysql.Open("root@tcp(127.0.0.1:3306)/test")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	_ = db.Close()
}

// TestOpenInterpolatesParams: a pool from Open sends a statement with
// arguments without preparing it, unless the DSN says interpolateParams=false
// (the control, which shows the check can fail).
func TestOpenInterpolatesParams(t *testing.T) {
	t.Parallel()
	testdb.MySQL(t) // skips, or fails under OUTBOX_REQUIRE_DBS=1, without a server
	dsn := os.Getenv(testdb.MySQLEnv)
	if strings.Contains(dsn, "interpolateParams=") || strings.Contains(dsn, "charset=") {
		t.Skipf("%s sets interpolateParams or charset itself", testdb.MySQLEnv)
	}
	sep := "?"
	if strings.Contains(dsn[strings.LastIndexByte(dsn, '/'):], "?") {
		sep = "&"
	}
	for _, tc := range []struct {
		dsn          string
		wantPrepared bool
	}{
		{dsn, false},
		{dsn + sep + "interpolateParams=false", true},
	} {
		db, err := mysql.Open(tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		ctx := context.Background()
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		prepares := func() int {
			var name string
			var n int
			if err := conn.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := prepares()
		var got int
		if err := conn.QueryRowContext(ctx, "SELECT ? + 1", 41).Scan(&got); err != nil || got != 42 {
			t.Fatalf("SELECT ? + 1 = %d, %v", got, err)
		}
		if prepared := prepares() > before; prepared != tc.wantPrepared {
			t.Errorf("%s: statement prepared = %v, want %v", tc.dsn, prepared, tc.wantPrepared)
		}
		_ = conn.Close()
	}
}
