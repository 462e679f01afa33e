package store_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
	"github.com/outboxkit/outbox/store/sqlite"
)

// opens are the Open functions that share one DSN vocabulary.
var opens = map[string]func(string) (*sql.DB, error){
	"postgres.Open": postgres.Open,
	"mysql.Open":    mysql.Open,
	"sqlite.Open":   sqlite.Open,
	"store.Open":    store.Open,
}

// TestOpenForms: every Open takes its database's forms and store.Open takes
// them all; every other Open refuses a form with an error that names the
// Open that takes it; none connects to check.
func TestOpenForms(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		dsn    string
		opener string // the Open of the DSN's database
	}{
		{"postgres://u:pw@127.0.0.1:1/db?sslmode=disable", "postgres.Open"},
		{"postgresql://u@127.0.0.1:1/db", "postgres.Open"},
		{"host=127.0.0.1 port=1 user=u dbname=db sslmode=disable", "postgres.Open"},
		{"root:pw@tcp(127.0.0.1:1)/test?parseTime=true&loc=UTC", "mysql.Open"},
		{"mysql://root@tcp(127.0.0.1:1)/test", "mysql.Open"},
		{"mysql://root@unix(/nonexistent/mysqld.sock)/test", "mysql.Open"},
		{"root@/test", "mysql.Open"},
		{filepath.Join(dir, "plain.db"), "sqlite.Open"},
		{"sqlite://" + filepath.Join(dir, "abs.db"), "sqlite.Open"},
		{"file:" + filepath.Join(dir, "file.db"), "sqlite.Open"},
		{"file://" + filepath.Join(dir, "file3.db"), "sqlite.Open"},
	} {
		for name, open := range opens {
			db, err := open(tc.dsn)
			if db != nil {
				_ = db.Close()
			}
			switch {
			case name == tc.opener || name == "store.Open":
				if err != nil {
					t.Errorf("%s(%q): %v", name, tc.dsn, err)
				}
			case !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), "open it with "+tc.opener):
				t.Errorf("%s(%q) = %v; want an error matching core.ErrInvalid that names %s", name, tc.dsn, err, tc.opener)
			case strings.Contains(err.Error(), ":pw@"):
				t.Errorf("%s(%q): the error shows the password: %v", name, tc.dsn, err)
			}
		}
	}
}

// TestOpenValidates: what can be checked without a connection is refused at
// Open, with the reason and the way out, never with the password.
func TestOpenValidates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		open, dsn, want string
	}{
		{"postgres.Open", "postgres://u:s3cret@h/db?sslmode=bogus", "sslmode is invalid"},
		{"store.Open", "postgres://u:s3cret@h/db?sslmode=bogus", "sslmode is invalid"},
		{"postgres.Open", "host=h password=s3cret sslmode=bogus", "sslmode is invalid"},
		{"postgres.Open", "postgres://u:s3cret@h:notaport/db", "invalid port"},
		{"postgres.Open", "", "is empty"},
		{"mysql.Open", "root:s3cret@tcp(h:3306)/test?loc=Local", "loc=Local: the outbox stores UTC timestamps; drop loc or set loc=UTC"},
		{"mysql.Open", "mysql://root:s3cret@tcp(h:3306)/test?loc=Europe%2FParis", "drop loc or set loc=UTC"},
		{"mysql.Open", "root:s3cret@tcp(h:3306)/test?parseTime=false", "parseTime=false"},
		{"mysql.Open", "root:s3cret@tcp(h:3306)/test?parseTime=maybe", "parseTime"},
		{"mysql.Open", "mysql://root:s3cret@127.0.0.1:3306/test", "mysql://root:xxx@tcp(127.0.0.1:3306)/test"},
		{"mysql.Open", "root:s3cret@127.0.0.1:3306/test", "root:xxx@tcp(127.0.0.1:3306)/test"},
		{"store.Open", "root:s3cret@127.0.0.1:3306/test", "root:xxx@tcp(127.0.0.1:3306)/test"},
		{"mysql.Open", "mysql://", "nothing after mysql://"},
		{"sqlite.Open", "", "is empty"},
		{"sqlite.Open", "file:x.db?mode=ro", "parameters are not supported"},
		{"store.Open", "sqlite://x.db?_pragma=foreign_keys(1)", "parameters are not supported"},
		{"store.Open", "oracle://u:s3cret@h/db", `unknown scheme "oracle"; want postgres://`},
		{"store.Open", "", "is empty; want postgres://"},
	} {
		db, err := opens[tc.open](tc.dsn)
		if db != nil {
			_ = db.Close()
		}
		if !errors.Is(err, core.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s(%q) = %v; want an error matching core.ErrInvalid containing %q", tc.open, tc.dsn, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s(%q): the error shows the password: %v", tc.open, tc.dsn, err)
		}
	}
}

// TestOpenFormsConnect: each form of the test servers' DSNs reaches the
// server as the user it names, through its database's Open and store.Open,
// and Detect then finds that database's store. (mysql.Open once took
// mysql://root@... and logged in as user "mysql".)
func TestOpenFormsConnect(t *testing.T) {
	t.Parallel()
	type form struct{ name, dsn string }
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		testdb.Postgres(t) // skips, or fails under OUTBOX_REQUIRE_DBS=1, without a server
		dsn := os.Getenv(testdb.PostgresEnv)
		cfg, err := pgconn.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		kv := fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", cfg.Host, cfg.Port, cfg.User, cfg.Database)
		if cfg.Password != "" {
			kv += " password='" + strings.ReplaceAll(cfg.Password, "'", `\'`) + "'"
		}
		checkForms(t, postgres.Open, "SELECT current_user", cfg.User, "*postgres.Store",
			form{"url", dsn}, form{"keyword/value", kv})
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		testdb.MySQL(t)
		dsn := os.Getenv(testdb.MySQLEnv)
		user := dsn[:strings.LastIndexByte(dsn, '@')]
		user, _, _ = strings.Cut(user, ":")
		checkForms(t, mysql.Open, "SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1)", user, "*mysql.Store",
			form{"driver form", dsn}, form{"mysql://", "mysql://" + dsn})
	})
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		p := filepath.Join(dir, "o.db")
		checkForms(t, sqlite.Open, "SELECT 'main'", "main", "*sqlite.Store",
			form{"path", p}, form{"sqlite://", "sqlite://" + p}, form{"file:", "file:" + p}, form{"file://", "file://" + p})
	})
}

// checkForms opens each form with open and with store.Open, and checks that
// query answers want and that Detect finds a store of type storeType.
func checkForms(t *testing.T, open func(string) (*sql.DB, error), query, want, storeType string, forms ...struct{ name, dsn string }) {
	t.Helper()
	for _, f := range forms {
		for _, o := range []struct {
			name string
			open func(string) (*sql.DB, error)
		}{{"own Open", open}, {"store.Open", store.Open}} {
			db, err := o.open(f.dsn)
			if err != nil {
				t.Errorf("%s, %s: %v", f.name, o.name, err)
				continue
			}
			var got string
			if err := db.QueryRowContext(context.Background(), query).Scan(&got); err != nil || got != want {
				t.Errorf("%s, %s: %s = %q, %v; want %q", f.name, o.name, query, got, err, want)
			}
			st, err := store.Detect(db, "")
			if err != nil || fmt.Sprintf("%T", st) != storeType {
				t.Errorf("%s, %s: Detect = %T, %v; want %s", f.name, o.name, st, err, storeType)
			}
			_ = db.Close()
		}
	}
}
