package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/sqlite"
)

// binary is the outboxctl built once for every test, run as a subprocess.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outboxctl-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "outboxctl")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	if out, err := exec.Command("go", append(args, ".")...).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build outboxctl: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

// cli runs outboxctl with args and env (nothing inherited but PATH and HOME).
func cli(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	// GORACE: a race-enabled binary otherwise sleeps a second at exit.
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"GORACE=atexit_sleep_ms=0 halt_on_error=1"}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run outboxctl: %v", err)
	}
	r := result{stdout: stdout.String(), stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
	t.Logf("outboxctl %s -> %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

func (r result) want(t *testing.T, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

// target is a database with a fresh outbox table, and the DSN outboxctl
// takes for it.
type target struct {
	testdb.Target
	dsn string
}

// forEach runs fn on SQLite (a file) and, when configured, PostgreSQL and
// MySQL, converting their test DSNs to outboxctl's form.
func forEach(t *testing.T, fn func(t *testing.T, tg target)) {
	for _, name := range testdb.Dialects {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, open(t, name))
		})
	}
}

func open(t *testing.T, name string) target {
	t.Helper()
	switch name {
	case "postgres":
		tg := testdb.Postgres(t)
		return target{tg, os.Getenv(testdb.PostgresEnv)}
	case "mysql":
		tg := testdb.MySQL(t)
		return target{tg, "mysql://" + os.Getenv(testdb.MySQLEnv)}
	}
	// SQLite: our own file, since the CLI needs its path.
	path := filepath.Join(t.TempDir(), "outbox.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	table := testdb.UniqueName("outbox")
	st, err := sqlite.New(sqlite.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateSchema(testCtx(t), db); err != nil {
		t.Fatal(err)
	}
	newStore := func(table string) (testdb.Store, error) { return sqlite.New(sqlite.Config{Table: table}) }
	return target{testdb.Target{Name: "sqlite", DB: db, Store: st, Table: table, NewStore: newStore}, "sqlite://" + path}
}

// run runs outboxctl on tg's database and table.
func (tg target) run(t *testing.T, args ...string) result {
	t.Helper()
	return cli(t, nil, append([]string{"--dsn", tg.dsn, "--table", tg.Table}, args...)...)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

var now = time.Now().UTC().Truncate(time.Second)

const day = 24 * time.Hour

type seedRow struct {
	id, eventType string
	status        core.Status
	at            time.Time // done_at for terminal rows, created_at otherwise
	payload       []byte    // JSON unless it is not valid JSON
}

func seed(t *testing.T, tg target, rows ...seedRow) {
	t.Helper()
	ctx := testCtx(t)
	for i, r := range rows {
		created := r.at
		if r.status.Terminal() {
			created = r.at.Add(-time.Hour + time.Duration(i)*time.Second)
		}
		spec := core.EnvelopeSpec{ID: r.id, Type: core.EventName(r.eventType), AggregateType: core.AggregateName("Order"),
			AggregateID: "order-" + r.id, OccurredAt: created, JSON: []byte(`{"secret":"payload-` + r.id + `"}`)}
		if r.payload != nil {
			spec.JSON, spec.Bytes = nil, r.payload
		}
		env, err := core.NewEnvelope(spec)
		if err != nil {
			t.Fatal(err)
		}
		opts := core.InsertOptions{}
		if r.status != core.StatusNew {
			opts = core.InsertOptions{LeaseOwner: "seeder", LeaseAt: time.Now()}
		}
		if err := tg.Store.Insert(ctx, tg.DB, []core.Envelope{env}, opts); err != nil {
			t.Fatalf("insert %s: %v", r.id, err)
		}
		ok := true
		switch r.status {
		case core.StatusRetry:
			ok, err = tg.Store.MarkRetry(ctx, tg.DB, "seeder", r.id, now.Add(time.Hour), "try again")
		case core.StatusDone:
			ok, err = tg.Store.MarkDone(ctx, tg.DB, "seeder", r.id, r.at)
		case core.StatusDead:
			ok, err = tg.Store.MarkDead(ctx, tg.DB, "seeder", r.id, r.at, "listener failed\tbadly\non "+r.id)
		}
		if err != nil || !ok {
			t.Fatalf("seed %s: %v %v", r.id, ok, err)
		}
	}
}

func status(t *testing.T, tg target, id string) string {
	t.Helper()
	ev, err := tg.Store.Get(testCtx(t), tg.DB, id)
	if err != nil {
		return "missing"
	}
	return ev.Status.String()
}

func deadCount(t *testing.T, tg target) int64 {
	t.Helper()
	n, err := tg.Store.CountDead(testCtx(t), tg.DB, core.DeadFilter{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func mustContain(t *testing.T, out string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, out)
		}
	}
}

func TestUsage(t *testing.T) {
	cli(t, nil).want(t, exitUsage)
	mustContain(t, cli(t, nil, "help").want(t, exitOK).stdout, "Exit codes:", "dead replay-all")
	mustContain(t, cli(t, nil, "--help").want(t, exitOK).stdout, "Usage: outboxctl")
	mustContain(t, cli(t, nil, "help", "purge").want(t, exitOK).stdout, "--older-than", "-yes", "Exit codes:")
	mustContain(t, cli(t, nil, "dead", "list", "-h").want(t, exitOK).stdout, "-payload")
	// help takes every command the usage lists, those with subcommands too.
	mustContain(t, cli(t, nil, "help", "dead").want(t, exitOK).stdout, "outboxctl dead list [", "outboxctl dead replay-all [",
		"outboxctl dead blocked [", "outboxctl dead skip [", "'outboxctl help dead SUBCOMMAND'")
	mustContain(t, cli(t, nil, "help", "migrate").want(t, exitOK).stdout, "outboxctl migrate status [", "outboxctl migrate up [",
		"outboxctl migrate down --to N", "outboxctl migrate files --format")
	mustContain(t, cli(t, nil, "help", "partitions").want(t, exitOK).stdout, "outboxctl partitions migrate [")
	mustContain(t, cli(t, nil, "help", "migrate", "up").want(t, exitOK).stdout, "-to", "-dry-run")
	mustContain(t, cli(t, nil, "help", "frobnicate").want(t, exitUsage).stderr, `unknown command "frobnicate" (want one of: dead, migrate,`)
	// Every command the usage text names is one help takes.
	seen := map[string]bool{"help": true}
	for _, line := range strings.Split(cli(t, nil, "help").want(t, exitOK).stdout, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") &&
			!strings.HasPrefix(f[0], "-") && !seen[f[0]] {
			seen[f[0]] = true
			cli(t, nil, "help", f[0]).want(t, exitOK)
		}
	}
	if len(seen) < 8 {
		t.Errorf("the usage text lists %d commands, want at least 8: %v", len(seen)-1, seen)
	}
	cli(t, nil, "frobnicate").want(t, exitUsage)
	cli(t, nil, "dead").want(t, exitUsage)
	cli(t, nil, "dead", "resurrect").want(t, exitUsage)
	cli(t, nil, "stats", "--bogus").want(t, exitUsage)
	mustContain(t, cli(t, nil, "stats").want(t, exitUsage).stderr, "OUTBOX_DSN")
	cli(t, nil, "--dsn", "oracle://x", "stats").want(t, exitUsage)
	cli(t, nil, "--dsn", "sqlite://x.db?mode=ro", "stats").want(t, exitUsage)
	cli(t, nil, "--dsn", "sqlite://x.db", "--table", "bad name", "stats").want(t, exitUsage)
	cli(t, nil, "--dsn", "sqlite://x.db", "purge").want(t, exitUsage)
	cli(t, nil, "--dsn", "sqlite://x.db", "purge", "--older-than", "1h", "--keep-dead", "--dead-older-than", "2h").want(t, exitUsage)
	cli(t, nil, "--dsn", "sqlite://x.db", "dead", "replay").want(t, exitUsage)
	cli(t, nil, "schema").want(t, exitUsage)
	cli(t, nil, "--dsn", "sqlite://x.db", "stats", "--timeout", "-1s").want(t, exitUsage)
	cli(t, nil, "--dsn", "sqlite://x.db", "stats", "--timeout", "soon").want(t, exitUsage)
	cli(t, nil, "schema", "oracle").want(t, exitUsage)
	// A missing SQLite file is an error, not a new empty database.
	missing := filepath.Join(t.TempDir(), "nope.db")
	cli(t, nil, "--dsn", "sqlite://"+missing, "stats").want(t, exitError)
	if _, err := os.Stat(missing); err == nil {
		t.Error("outboxctl created the missing SQLite file")
	}
}

// TestParseDSN: outboxctl reads the forms the Open functions read
// (internal/dsn has the full table); here, the forms of each database and
// the usage errors.
func TestParseDSN(t *testing.T) {
	for _, tc := range []struct{ dsn, dialect, conn string }{
		{"postgres://u@h:5432/db?sslmode=disable", "postgres", "postgres://u@h:5432/db?sslmode=disable"},
		{"postgresql://u@h/db", "postgres", "postgresql://u@h/db"},
		{"host=h user=u dbname=db sslmode=disable", "postgres", "host=h user=u dbname=db sslmode=disable"},
		{"mysql://root:pw@tcp(127.0.0.1:3306)/test?parseTime=true", "mysql", "root:pw@tcp(127.0.0.1:3306)/test?parseTime=true"},
		{"root@tcp(127.0.0.1:3306)/test", "mysql", "root@tcp(127.0.0.1:3306)/test"},
		{"mysql://root@/test", "mysql", "root@/test"},
		{"mysql://u@unix(/run/mysqld.sock)/db", "mysql", "u@unix(/run/mysqld.sock)/db"},
		{"sqlite:///var/lib/outbox.db", "sqlite", "/var/lib/outbox.db"},
		{"sqlite://rel.db", "sqlite", "rel.db"},
		{"file:/tmp/o.db", "sqlite", "/tmp/o.db"},
		{"file:///tmp/o.db", "sqlite", "/tmp/o.db"},
		{"/tmp/o.db", "sqlite", "/tmp/o.db"},
	} {
		d, c, err := parseDSN(tc.dsn)
		if err != nil || d != tc.dialect || c != tc.conn {
			t.Errorf("parseDSN(%q) = %s, %s, %v; want %s, %s", tc.dsn, d, c, err, tc.dialect, tc.conn)
		}
	}
	for _, bad := range []string{"", "oracle://x", "sqlite://", "mysql://", "file:x.db?mode=ro"} {
		var ue *usageError
		if _, _, err := parseDSN(bad); !errors.As(err, &ue) {
			t.Errorf("parseDSN(%q) = %v, want a usage error", bad, err)
		}
	}
	// A MySQL address without its protocol is the usual slip: the error
	// shows the DSN as the driver wants it, without the password.
	_, _, err := parseDSN("mysql://root:s3cret@127.0.0.1:3306/test")
	if err == nil || !strings.Contains(err.Error(), "mysql://root:xxx@tcp(127.0.0.1:3306)/test") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("mysql DSN without tcp(...): %v", err)
	}
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"7d": 7 * day, "1d12h": 36 * time.Hour, "90m": 90 * time.Minute,
		"0d": 0, "36h": 36 * time.Hour, "-1h": -time.Hour} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "d", "1x", "1.5d", "-1d", "7dd", "1d-2h", "d7"} {
		if got, err := parseDuration(bad); err == nil {
			t.Errorf("parseDuration(%q) = %v, want an error", bad, got)
		}
	}
}

// TestMissingTableHint runs a command against a table that does not exist:
// the error says so once, and a hint names --table.
func TestMissingTableHint(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		r := tg.run(t, "--table", "no_such_outbox", "dead", "count").want(t, exitError)
		mustContain(t, r.stderr, "count dead events: ", `hint: the table "no_such_outbox" does not exist`, "--table")
		if strings.Count(r.stderr, "count dead events") != 1 {
			t.Errorf("the operation is named more than once:\n%s", r.stderr)
		}
	})
}

func TestSchemaCreatesAWorkingTable(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		table := testdb.UniqueName("ddl")
		ddl := cli(t, nil, "schema", tg.Name, "--table", table).want(t, exitOK).stdout
		ctx := testCtx(t)
		st, err := tg.NewStore(table)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = testdb.DropTable(context.Background(), tg.DB, st) })
		for _, stmt := range strings.Split(ddl, ";\n") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := tg.DB.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("run DDL from outboxctl schema: %v\n%s", err, stmt)
			}
		}
		env, err := core.NewEnvelope(core.EnvelopeSpec{ID: "e1", Type: core.EventName("T"), JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Insert(ctx, tg.DB, []core.Envelope{env}, core.InsertOptions{}); err != nil {
			t.Fatalf("insert into the table outboxctl's DDL made: %v", err)
		}
		evs, _, err := st.Claim(ctx, tg.DB, core.ClaimParams{Owner: "o", Now: time.Now().Add(time.Second),
			LeaseTimeout: time.Minute, Limit: 10})
		if err != nil || len(evs) != 1 {
			t.Fatalf("claim from the table outboxctl's DDL made: %v, %v", evs, err)
		}
	})
	// The dialect can come from the DSN scheme without connecting.
	out := cli(t, nil, "--dsn", "mysql://nobody@tcp(192.0.2.1:1)/x", "schema").want(t, exitOK).stdout
	mustContain(t, out, "CREATE TABLE IF NOT EXISTS `outbox_event`")
}

func TestStats(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		seed(t, tg,
			seedRow{id: "n1", eventType: "A", status: core.StatusNew, at: now.Add(-90 * time.Second)},
			seedRow{id: "n2", eventType: "A", status: core.StatusNew, at: now.Add(-10 * time.Second)},
			seedRow{id: "r1", eventType: "A", status: core.StatusRetry, at: now.Add(-30 * time.Second)},
			seedRow{id: "d1", eventType: "A", status: core.StatusDead, at: now},
			seedRow{id: "d2", eventType: "B", status: core.StatusDead, at: now},
			seedRow{id: "x1", eventType: "A", status: core.StatusDone, at: now},
		)
		// A leased pending row: claim the oldest.
		if _, _, err := tg.Store.Claim(testCtx(t), tg.DB, core.ClaimParams{Owner: "w", Now: time.Now(),
			LeaseTimeout: time.Hour, Limit: 1}); err != nil {
			t.Fatal(err)
		}
		out := tg.run(t, "stats").want(t, exitOK).stdout
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) != 2 {
				t.Fatalf("stats line %q is not 'key value'", line)
			}
			got[f[0]] = f[1]
		}
		for k, v := range map[string]string{"table": tg.Table, "pending": "2", "retrying": "1", "leased": "1",
			"dead": "2", "done": "1", "oldest_pending": now.Add(-90 * time.Second).Format(textTime)} {
			if got[k] != v {
				t.Errorf("stats %s = %q, want %q", k, got[k], v)
			}
		}
		if d, err := time.ParseDuration(got["oldest_pending_age"]); err != nil || d < 90*time.Second {
			t.Errorf("oldest_pending_age = %q", got["oldest_pending_age"])
		}

		var js stats
		if err := json.Unmarshal([]byte(tg.run(t, "stats", "--json").want(t, exitOK).stdout), &js); err != nil {
			t.Fatal(err)
		}
		if js.Pending != 2 || js.Retrying != 1 || js.Leased != 1 || js.Dead != 2 || js.Done != 1 ||
			js.OldestAge == nil || *js.OldestAge < 90 || js.Table != tg.Table {
			t.Errorf("stats --json = %+v", js)
		}
	})
}

func TestStatsOnEmptyTableAndFromEnvironment(t *testing.T) {
	tg := open(t, "sqlite")
	out := cli(t, []string{"OUTBOX_DSN=" + tg.dsn, "OUTBOX_TABLE=" + tg.Table}, "stats").want(t, exitOK).stdout
	mustContain(t, out, "pending             0\n", "oldest_pending      -\n", "oldest_pending_age  -\n")
	// Not a table: an error, exit 1.
	cli(t, []string{"OUTBOX_DSN=" + tg.dsn}, "stats", "--table", "no_such_table").want(t, exitError)
}

func deadRows() []seedRow {
	return []seedRow{
		{id: "d1", eventType: "Paid", status: core.StatusDead, at: now},
		{id: "n1", eventType: "Paid", status: core.StatusNew, at: now},
		{id: "d2", eventType: "Shipped", status: core.StatusDead, at: now},
		{id: "d3", eventType: "Paid", status: core.StatusDead, at: now, payload: []byte{0xff, 0x00, 0x01}},
		{id: "x1", eventType: "Paid", status: core.StatusDone, at: now},
	}
}

func TestDeadListAndCount(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		seed(t, tg, deadRows()...)
		out := tg.run(t, "dead", "list").want(t, exitOK).stdout
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 4 || !strings.HasPrefix(lines[0], "EVENT_ID") {
			t.Fatalf("dead list: want a header and 3 rows:\n%s", out)
		}
		for i, id := range []string{"d1", "d2", "d3"} {
			if f := strings.Fields(lines[i+1]); f[0] != id || f[2] == "" {
				t.Errorf("row %d = %q, want event %s (oldest first)", i+1, lines[i+1], id)
			}
		}
		mustContain(t, out, "listener failed badly on d1")
		if strings.Contains(out, "payload-") {
			t.Error("dead list printed payloads without --payload")
		}

		out = tg.run(t, "dead", "list", "--type", "Paid", "--limit", "1").want(t, exitOK).stdout
		if n := strings.Count(strings.TrimSpace(out), "\n"); n != 1 || !strings.Contains(out, "d1") {
			t.Errorf("--type Paid --limit 1:\n%s", out)
		}

		out = tg.run(t, "dead", "list", "--payload").want(t, exitOK).stdout
		mustContain(t, out, `{"secret":"payload-d1"}`, "base64:/wAB")

		var evs []eventJSON
		if err := json.Unmarshal([]byte(tg.run(t, "dead", "list", "--json").want(t, exitOK).stdout), &evs); err != nil {
			t.Fatal(err)
		}
		if len(evs) != 3 || evs[0].EventID != "d1" || evs[0].Status != "DEAD" || evs[0].Attempts != 1 ||
			evs[0].AggregateID != "order-d1" || evs[0].Payload != nil || evs[0].PayloadBytes == 0 {
			t.Errorf("dead list --json = %+v", evs)
		}
		evs = nil
		if err := json.Unmarshal([]byte(tg.run(t, "dead", "list", "--json", "--payload").want(t, exitOK).stdout), &evs); err != nil {
			t.Fatal(err)
		}
		var payload bytes.Buffer
		if len(evs) == 3 {
			_ = json.Compact(&payload, evs[0].Payload)
		}
		if len(evs) != 3 || payload.String() != `{"secret":"payload-d1"}` || evs[2].PayloadBase64 != "/wAB" {
			t.Errorf("dead list --json --payload = %+v", evs)
		}

		if out := tg.run(t, "dead", "count").want(t, exitOK).stdout; out != "3\n" {
			t.Errorf("dead count = %q, want 3", out)
		}
		if out := tg.run(t, "dead", "count", "--type", "Paid", "--aggregate", "Order").want(t, exitOK).stdout; out != "2\n" {
			t.Errorf("dead count --type Paid = %q, want 2", out)
		}
		if out := tg.run(t, "dead", "count", "--json", "--aggregate", "Invoice").want(t, exitOK).stdout; strings.TrimSpace(out) != `{
  "dead": 0
}` {
			t.Errorf("dead count --json = %q", out)
		}
	})
}

func TestDeadReplay(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		seed(t, tg, deadRows()...)

		r := tg.run(t, "dead", "replay", "d1", "x1", "missing").want(t, exitConfirm)
		mustContain(t, r.stdout, "would replay d1", "skip x1: status DONE, not DEAD", "skip missing: not found")
		mustContain(t, r.stderr, "--yes")
		tg.run(t, "dead", "replay", "--dry-run", "d1").want(t, exitOK)
		if s := status(t, tg, "d1"); s != "DEAD" {
			t.Fatalf("d1 is %s after a replay without --yes", s)
		}

		r = tg.run(t, "dead", "replay", "d1", "x1", "--yes").want(t, exitNotFound)
		mustContain(t, r.stdout, "replayed d1\n")
		if status(t, tg, "d1") != "NEW" || status(t, tg, "x1") != "DONE" {
			t.Errorf("after replay: d1 %s, x1 %s", status(t, tg, "d1"), status(t, tg, "x1"))
		}
		tg.run(t, "dead", "replay", "--yes", "d2", "d3").want(t, exitOK)
		if n := deadCount(t, tg); n != 0 {
			t.Errorf("%d dead left", n)
		}
		tg.run(t, "dead", "replay", "--yes", "d2").want(t, exitNotFound)
	})
}

func TestDeadReplayAll(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		var rows []seedRow
		for i := range 5 {
			rows = append(rows, seedRow{id: fmt.Sprintf("a%d", i), eventType: "A", status: core.StatusDead, at: now})
		}
		rows = append(rows, seedRow{id: "b0", eventType: "B", status: core.StatusDead, at: now})
		seed(t, tg, rows...)

		r := tg.run(t, "dead", "replay-all", "--type", "A").want(t, exitConfirm)
		mustContain(t, r.stdout, "would replay 5 DEAD events (type=A aggregate=*)")
		r = tg.run(t, "dead", "replay-all", "--dry-run").want(t, exitOK)
		mustContain(t, r.stdout, "would replay 6 DEAD events")
		if n := deadCount(t, tg); n != 6 {
			t.Fatalf("%d dead after replay-all without --yes, want 6 (nothing changed)", n)
		}

		r = tg.run(t, "dead", "replay-all", "--type", "A", "--batch", "2", "--yes").want(t, exitOK)
		mustContain(t, r.stdout, "replayed 5 DEAD events\n")
		if n := deadCount(t, tg); n != 1 || status(t, tg, "b0") != "DEAD" || status(t, tg, "a4") != "NEW" {
			t.Errorf("after replay-all --type A: %d dead, b0 %s, a4 %s", n, status(t, tg, "b0"), status(t, tg, "a4"))
		}
		// Nothing matching: nothing to confirm.
		tg.run(t, "dead", "replay-all", "--type", "A").want(t, exitOK)
	})
}

func TestPurge(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		seed(t, tg,
			seedRow{id: "done-old", eventType: "A", status: core.StatusDone, at: now.Add(-8 * day)},
			seedRow{id: "done-older", eventType: "A", status: core.StatusDone, at: now.Add(-20 * day)},
			seedRow{id: "done-new", eventType: "A", status: core.StatusDone, at: now.Add(-6 * day)},
			seedRow{id: "dead-old", eventType: "A", status: core.StatusDead, at: now.Add(-8 * day)},
			seedRow{id: "dead-older", eventType: "A", status: core.StatusDead, at: now.Add(-40 * day)},
			seedRow{id: "new-old", eventType: "A", status: core.StatusNew, at: now.Add(-60 * day)},
			seedRow{id: "retry-old", eventType: "A", status: core.StatusRetry, at: now.Add(-60 * day)},
		)
		all := []string{"done-old", "done-older", "done-new", "dead-old", "dead-older", "new-old", "retry-old"}
		intact := func() {
			t.Helper()
			for _, id := range all {
				if status(t, tg, id) == "missing" {
					t.Fatalf("%s deleted", id)
				}
			}
		}

		r := tg.run(t, "purge", "--older-than", "168h").want(t, exitConfirm)
		mustContain(t, r.stdout, "would delete 2 DONE events finished before", "would delete 2 DEAD events that died before")
		intact()
		r = tg.run(t, "purge", "--older-than", "7d", "--dead-older-than", "30d", "--dry-run").want(t, exitOK)
		mustContain(t, r.stdout, "would delete 2 DONE", "would delete 1 DEAD")
		intact()

		r = tg.run(t, "purge", "--older-than", "168h", "--keep-dead", "--batch", "1", "--yes").want(t, exitOK)
		mustContain(t, r.stdout, "keeping all DEAD events", "deleted 2 events\n")
		r = tg.run(t, "purge", "--older-than", "168h", "--dead-older-than", "720h", "--yes").want(t, exitOK)
		mustContain(t, r.stdout, "deleted 1 events\n")
		for id, want := range map[string]string{"done-old": "missing", "done-older": "missing", "done-new": "DONE",
			"dead-old": "DEAD", "dead-older": "missing", "new-old": "NEW", "retry-old": "RETRY"} {
			if got := status(t, tg, id); got != want {
				t.Errorf("%s is %s, want %s", id, got, want)
			}
		}
		// Nothing left to purge: no confirmation needed.
		tg.run(t, "purge", "--older-than", "720h").want(t, exitOK)
	})
}

// TestDSNFormsReachTheTable: every form of a database's DSN that its Open
// takes, outboxctl takes too, and reaches the same table.
func TestDSNFormsReachTheTable(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		forms := []string{tg.dsn}
		switch tg.Name {
		case "mysql":
			forms = append(forms, strings.TrimPrefix(tg.dsn, "mysql://"))
		case "sqlite":
			path := strings.TrimPrefix(tg.dsn, "sqlite://")
			forms = append(forms, path, "file:"+path, "file://"+path)
		}
		for _, dsn := range forms {
			out := cli(t, nil, "--dsn", dsn, "--table", tg.Table, "stats", "--json").want(t, exitOK).stdout
			var st struct{ Table string }
			if err := json.Unmarshal([]byte(out), &st); err != nil || st.Table != tg.Table {
				t.Errorf("--dsn %s: stats --json = %q, %v; want table %s", dsn, out, err, tg.Table)
			}
		}
	})
}
