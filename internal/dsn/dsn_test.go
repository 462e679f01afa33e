package dsn

import (
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dsn     string
		dialect Dialect
		conn    string
	}{
		// PostgreSQL: URLs and pgx's keyword/value form, passed on as they are.
		{"postgres://u@h:5432/db?sslmode=disable", Postgres, "postgres://u@h:5432/db?sslmode=disable"},
		{"postgresql://u@h/db", Postgres, "postgresql://u@h/db"},
		{"POSTGRES://u@h/db", Postgres, "POSTGRES://u@h/db"},
		{"host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable", Postgres,
			"host=127.0.0.1 port=5432 user=postgres dbname=test sslmode=disable"},
		{"dbname=test", Postgres, "dbname=test"},
		// MySQL: the driver's form, alone or behind mysql://.
		{"root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC", MySQL, "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC"},
		{"root:pw@tcp(127.0.0.1:3306)/test", MySQL, "root:pw@tcp(127.0.0.1:3306)/test"},
		{"mysql://root:pw@tcp(127.0.0.1:3306)/test?parseTime=true", MySQL, "root:pw@tcp(127.0.0.1:3306)/test?parseTime=true"},
		{"mysql://root@/test", MySQL, "root@/test"},
		{"root@/test", MySQL, "root@/test"},
		{"u@unix(/run/mysqld/mysqld.sock)/db", MySQL, "u@unix(/run/mysqld/mysqld.sock)/db"},
		{"mysql://u@unix(/run/mysqld/mysqld.sock)/db", MySQL, "u@unix(/run/mysqld/mysqld.sock)/db"},
		{"tcp(127.0.0.1:3306)/test", MySQL, "tcp(127.0.0.1:3306)/test"},
		{"u:p@ss@tcp(h:3306)/db", MySQL, "u:p@ss@tcp(h:3306)/db"},
		// SQLite: the URL forms and plain paths.
		{"sqlite:///var/lib/outbox.db", SQLite, "/var/lib/outbox.db"},
		{"sqlite://rel.db", SQLite, "rel.db"},
		{"file:/tmp/o.db", SQLite, "/tmp/o.db"},
		{"file:///tmp/o.db", SQLite, "/tmp/o.db"},
		{"file:rel.db", SQLite, "rel.db"},
		{"/tmp/o.db", SQLite, "/tmp/o.db"},
		{"app.db", SQLite, "app.db"},
		{":memory:", SQLite, ":memory:"},
	} {
		got, err := Parse(tc.dsn)
		if err != nil || got.Dialect != tc.dialect || got.Conn != tc.conn {
			t.Errorf("Parse(%q) = %+v, %v; want %s %q", tc.dsn, got, err, tc.dialect, tc.conn)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dsn, want string }{
		{"", "is empty; want postgres://"},
		{"  ", "is empty"},
		{"oracle://x", `unknown scheme "oracle"; want postgres://`},
		{"redis://localhost:6379", "user:pass@tcp(host:3306)/db"},
		{"mysql://", "nothing after mysql://"},
		{"sqlite://", "no file path"},
		{"file:", "no file path"},
		{"file:x.db?mode=ro", "SQLite parameters are not supported"},
		{"sqlite://x.db#frag", "SQLite parameters are not supported"},
		// A MySQL address without its network: the error shows the form the
		// driver wants, without the password.
		{"mysql://root:s3cret@127.0.0.1:3306/test", "mysql://root:xxx@tcp(127.0.0.1:3306)/test"},
		{"root@127.0.0.1:3306/test", "root@tcp(127.0.0.1:3306)/test"},
	} {
		_, err := Parse(tc.dsn)
		var de *Error
		if !errors.As(err, &de) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v; want an *Error containing %q", tc.dsn, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Parse(%q): the error shows the password: %v", tc.dsn, err)
		}
	}
}

func TestFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dsn  string
		want Dialect
		conn string // "" when an error containing msg is expected
		msg  string
	}{
		{"postgres://u@h/db", Postgres, "postgres://u@h/db", ""},
		{"mysql://root@tcp(h:3306)/db", MySQL, "root@tcp(h:3306)/db", ""},
		{"sqlite:///x.db", SQLite, "/x.db", ""},
		{"root@tcp(127.0.0.1:3306)/test", Postgres, "", "is a MySQL DSN: open it with mysql.Open, or store.Open"},
		{"mysql://root@tcp(127.0.0.1:3306)/test", SQLite, "", "is a MySQL DSN: open it with mysql.Open"},
		{"postgres://u:s3cret@h/db", MySQL, "", "is a PostgreSQL DSN: open it with postgres.Open"},
		{"postgres://u@h/db", SQLite, "", "is a PostgreSQL DSN: open it with postgres.Open"},
		{"test", Postgres, "", "not a PostgreSQL DSN (it reads as a SQLite file path)"},
		{"test", MySQL, "", "a MySQL DSN is user:pass@tcp(host:3306)/db"},
	} {
		conn, err := For(tc.dsn, tc.want)
		switch {
		case tc.conn != "" && (err != nil || conn != tc.conn):
			t.Errorf("For(%q, %s) = %q, %v; want %q", tc.dsn, tc.want, conn, err, tc.conn)
		case tc.conn == "" && (err == nil || !strings.Contains(err.Error(), tc.msg)):
			t.Errorf("For(%q, %s) = %q, %v; want an error containing %q", tc.dsn, tc.want, conn, err, tc.msg)
		case err != nil && strings.Contains(err.Error(), "s3cret"):
			t.Errorf("For(%q, %s): the error shows the password: %v", tc.dsn, tc.want, err)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u:s3cret@h:5432/db":                       "postgres://u:xxx@h:5432/db",
		"postgres://u@h/db?password=s3cret&sslmode=disable":   "postgres://u@h/db?password=xxx&sslmode=disable",
		"host=h user=u password=s3cret dbname=db":             "host=h user=u password=xxx dbname=db",
		"host=h password='s3 cret' dbname=db":                 "host=h password=xxx dbname=db",
		"mysql://root:s3cret@tcp(h)/db":                       "mysql://root:xxx@tcp(h)/db",
		"root:s3cret@tcp(127.0.0.1:3306)/test?parseTime=true": "root:xxx@tcp(127.0.0.1:3306)/test?parseTime=true",
		"root@tcp(127.0.0.1:3306)/test":                       "root@tcp(127.0.0.1:3306)/test",
		"/var/lib/app.db":                                     "/var/lib/app.db",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"postgres://u:pw@h/db", "root:pw@tcp(h:3306)/db", "mysql://u:pw@h:1/db", "sqlite://x.db",
		"file:x", "host=h password=pw", "x.db"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err == nil && (d.Conn == "" || d.Dialect == "") {
			t.Fatalf("Parse(%q) = %+v without an error", s, d)
		}
		_ = Redact(s)
	})
}
