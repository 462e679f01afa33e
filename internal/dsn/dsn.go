// Package dsn reads the connection strings the library accepts, in one place,
// so that postgres.Open, mysql.Open, sqlite.Open, store.Open and outboxctl
// take the same strings and refuse the same ones with the same words.
//
// The forms, by database:
//
//	PostgreSQL  postgres://user:pass@host:5432/db?sslmode=disable (also postgresql://),
//	            or pgx's keyword/value form: host=h port=5432 user=u dbname=db sslmode=disable
//	MySQL       user:pass@tcp(host:3306)/db?params (go-sql-driver/mysql's own form),
//	            or the same behind mysql://: mysql://user:pass@tcp(host:3306)/db
//	SQLite      sqlite:///abs/path.db, sqlite://rel/path.db, file:/abs/path.db,
//	            file:///abs/path.db, or a plain file path
//
// A string is read by its scheme; one without a scheme is MySQL when it has
// the driver's net(address) part, PostgreSQL when it starts with a libpq
// keyword, and a SQLite path otherwise.
package dsn

import (
	"fmt"
	"regexp"
	"strings"
)

// Dialect is the database a DSN names.
type Dialect string

// The dialects.
const (
	Postgres Dialect = "postgres"
	MySQL    Dialect = "mysql"
	SQLite   Dialect = "sqlite"
)

// Title is the dialect's name as people write it.
func (d Dialect) Title() string {
	switch d {
	case Postgres:
		return "PostgreSQL"
	case MySQL:
		return "MySQL"
	case SQLite:
		return "SQLite"
	}
	return string(d)
}

// Forms lists the accepted forms, for error messages.
const Forms = "postgres://user:pass@host:5432/db?sslmode=disable (or postgresql://, or host=... dbname=... keywords); " +
	"user:pass@tcp(host:3306)/db (or mysql://user:pass@tcp(host:3306)/db); " +
	"sqlite:///abs/path.db, sqlite://rel.db, file:path.db or a plain path"

// example is the form each dialect's error shows.
var example = map[Dialect]string{
	Postgres: "postgres://user:pass@host:5432/db?sslmode=disable, or host=host user=user dbname=db sslmode=disable",
	MySQL:    "user:pass@tcp(host:3306)/db, or mysql://user:pass@tcp(host:3306)/db",
	SQLite:   "a file path, sqlite:///abs/path.db, sqlite://rel.db or file:path.db",
}

// opener is the function that opens each dialect's DSNs.
var opener = map[Dialect]string{Postgres: "postgres.Open", MySQL: "mysql.Open", SQLite: "sqlite.Open"}

// DSN is a parsed connection string.
type DSN struct {
	Dialect Dialect
	// Conn is what the dialect's driver takes: the string itself for
	// PostgreSQL, the go-sql-driver/mysql form (without mysql://) for
	// MySQL, and the file path for SQLite.
	Conn string
}

// Error is a DSN that cannot be used, with what to write instead. Its text
// starts with the DSN, password hidden, for the caller to prefix.
type Error struct {
	DSN    string // redacted
	Reason string
}

func (e *Error) Error() string {
	switch {
	case e.DSN == "":
		return e.Reason
	case strings.HasPrefix(e.Reason, "is "):
		return fmt.Sprintf("%q %s", e.DSN, e.Reason)
	}
	return fmt.Sprintf("%q: %s", e.DSN, e.Reason)
}

func fail(s, format string, args ...any) error {
	return &Error{DSN: Redact(s), Reason: fmt.Sprintf(format, args...)}
}

// pgKeyword matches the start of pgx's keyword/value form: a libpq keyword
// and '='.
var pgKeyword = regexp.MustCompile(`^\s*(host|hostaddr|port|dbname|user|password|passfile|sslmode|sslcert|sslkey|sslrootcert|sslpassword|connect_timeout|application_name|options|service|servicefile|target_session_attrs)\s*=`)

// mysqlNet matches the driver form's network part: user@tcp(, @unix(, or a
// DSN starting with one.
var mysqlNet = regexp.MustCompile(`(^|@)(tcp|tcp4|tcp6|unix)\(`)

// mysqlBareAddr matches user[:pass]@host:port/ : a MySQL address without its
// network, the usual slip (the driver reads host:port as a network name).
var mysqlBareAddr = regexp.MustCompile(`^[^/@]*@[^/()@]+:[0-9]+/`)

// Parse reads s as one of the accepted forms.
func Parse(s string) (DSN, error) {
	if strings.TrimSpace(s) == "" {
		return DSN{}, &Error{Reason: "is empty; want " + Forms}
	}
	lower := strings.ToLower(s)
	switch {
	case strings.HasPrefix(lower, "postgres://"), strings.HasPrefix(lower, "postgresql://"):
		return DSN{Dialect: Postgres, Conn: s}, nil
	case strings.HasPrefix(lower, "mysql://"):
		conn := s[len("mysql://"):]
		if conn == "" {
			return DSN{}, fail(s, "nothing after mysql://; want %s", example[MySQL])
		}
		return mysql(s, conn, "mysql://")
	case strings.HasPrefix(lower, "sqlite://"):
		return sqlite(s, s[len("sqlite://"):])
	case strings.HasPrefix(lower, "file:"):
		return sqlite(s, strings.TrimPrefix(s[len("file:"):], "//"))
	case strings.Contains(s, "://"):
		scheme, _, _ := strings.Cut(s, "://")
		return DSN{}, fail(s, "unknown scheme %q; want %s", scheme, Forms)
	case pgKeyword.MatchString(s):
		return DSN{Dialect: Postgres, Conn: s}, nil
	case mysqlNet.MatchString(s), strings.Contains(s, "@/"), mysqlBareAddr.MatchString(s):
		return mysql(s, s, "")
	}
	return sqlite(s, s)
}

// mysql checks the go-sql-driver/mysql form conn, given as s.
func mysql(s, conn, scheme string) (DSN, error) {
	if fixed, ok := mysqlAddress(conn); !ok {
		return DSN{}, fail(s, "go-sql-driver/mysql wants the address as tcp(host:port) or unix(/path): %s%s",
			scheme, Redact(fixed))
	}
	return DSN{Dialect: MySQL, Conn: conn}, nil
}

// mysqlAddress reports whether the address of a go-sql-driver/mysql DSN
// ([user[:pass]@][net(addr)]/db) names its protocol, and if not, the DSN
// with the address wrapped in tcp(...). An empty address (the driver's
// default, 127.0.0.1:3306) is fine.
func mysqlAddress(conn string) (fixed string, ok bool) {
	at := strings.LastIndex(conn, "@")
	rest := conn[at+1:]
	slash := strings.IndexByte(rest, '/')
	if paren := strings.IndexByte(rest, '('); paren >= 0 && (slash < 0 || paren < slash) {
		return conn, true // net(addr): the path of unix(/path) may hold slashes
	}
	if slash <= 0 {
		return conn, true // the default address, or no database part (the driver says what is wrong)
	}
	return conn[:at+1] + "tcp(" + rest[:slash] + ")" + rest[slash:], false
}

// sqlite checks the SQLite path p, given as s.
func sqlite(s, p string) (DSN, error) {
	switch {
	case p == "":
		return DSN{}, fail(s, "no file path; want %s", example[SQLite])
	case strings.ContainsAny(p, "?#"):
		return DSN{}, fail(s, "SQLite parameters are not supported: sqlite.Open sets the pragmas the outbox needs "+
			"(WAL, synchronous=NORMAL, busy_timeout, BEGIN IMMEDIATE); give the file path alone")
	}
	return DSN{Dialect: SQLite, Conn: p}, nil
}

// For parses s and returns what want's driver takes, or an error naming
// the function that opens s when s is another dialect's.
func For(s string, want Dialect) (string, error) {
	d, err := Parse(s)
	if err != nil {
		return "", err
	}
	if d.Dialect != want {
		what := "a " + d.Dialect.Title() + " DSN"
		if d.Dialect == SQLite {
			what = "not a " + want.Title() + " DSN (it reads as a SQLite file path)"
		}
		return "", fail(s, "is %s: open it with %s, or store.Open, which takes every form; a %s DSN is %s",
			what, opener[d.Dialect], want.Title(), example[want])
	}
	return d.Conn, nil
}

// Redact returns s with its password replaced by xxx: the password of a
// URL or of the go-sql-driver/mysql form (user:pass@...), and the value of
// a password= keyword.
func Redact(s string) string {
	if pgKeyword.MatchString(s) {
		return pgPassword.ReplaceAllString(s, "${1}xxx")
	}
	s = queryPassword.ReplaceAllString(s, "${1}xxx")
	at := strings.LastIndex(s, "@")
	if at < 0 {
		return s
	}
	start := strings.Index(s, "://") + 3
	if start < 3 || start > at {
		start = 0
	}
	if colon := strings.Index(s[start:at], ":"); colon >= 0 {
		return s[:start+colon+1] + "xxx" + s[at:]
	}
	return s
}

// queryPassword matches a password parameter of a URL's query.
var queryPassword = regexp.MustCompile(`([?&]password=)[^&#]*`)

// pgPassword matches the value of a password keyword: quoted or not.
var pgPassword = regexp.MustCompile(`(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s]*)`)
