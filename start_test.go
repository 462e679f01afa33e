package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/outboxkit/outbox"
	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store"
	"github.com/outboxkit/outbox/store/migrations"
	"github.com/outboxkit/outbox/store/mysql"
	"github.com/outboxkit/outbox/store/postgres"
)

// TestStartChecksTable: Start refuses a table that does not exist, and one
// at an older schema version, with an error that names the table and the
// way to create or migrate it; nothing starts, and Start succeeds once the
// table is ready.
func TestStartChecksTable(t *testing.T) {
	testdb.ForEach(t, func(t *testing.T, tg testdb.Target) {
		t.Parallel()
		ctx := context.Background()
		for _, tc := range []struct {
			name    string
			prepare func(t *testing.T, st testdb.Store)
			says    []string
		}{
			{"missing table", func(*testing.T, testdb.Store) {},
				[]string{"does not exist", "Store.CreateSchema", "outboxctl migrate up", "store/migrations"}},
			{"schema version 1", func(t *testing.T, st testdb.Store) {
				m, err := migrations.New(migrations.Config{DB: tg.DB, Source: st.(migrations.Source)})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _, _ = tg.DB.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+m.VersionTable()) })
				if _, err := m.Up(ctx, 1); err != nil {
					t.Fatal(err)
				}
			}, []string{"schema version 1, the store expects 2", "column seq", "outboxctl migrate up", "CreateSchema"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				st, err := tg.NewStore(testdb.UniqueName("outbox_start"))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := testdb.DropTable(context.WithoutCancel(ctx), tg.DB, st); err != nil {
						t.Error(err)
					}
				})
				tc.prepare(t, st)
				var s seen
				ob, err := outbox.New(fast(outbox.Config{DB: tg.DB, Store: st, Registry: registry(t, &s)}))
				if err != nil {
					t.Fatal(err)
				}
				err = ob.Start(ctx)
				if !errors.Is(err, core.ErrSchema) {
					t.Fatalf("Start = %v, want an error matching core.ErrSchema", err)
				}
				for _, w := range append(tc.says, st.Table()) {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%q does not say %q", err, w)
					}
				}
				// Nothing started: the table made, Start succeeds and the
				// outbox delivers.
				if err := st.CreateSchema(ctx, tg.DB); err != nil {
					t.Fatal(err)
				}
				if err := ob.Start(ctx); err != nil {
					t.Fatalf("Start after CreateSchema: %v", err)
				}
				t.Cleanup(func() {
					if err := ob.Close(context.Background()); err != nil {
						t.Error(err)
					}
				})
				on := tg
				on.Store = st
				waitStatus(t, on, core.StatusDone, write(t, ob, 1, "chk")...)
			})
		}
	})
}

// TestStartServerDown: a server that is down at Start is logged once, with
// the host and port of the DSN and without its password, and Start goes on
// (the poller retries, as it does for any outage).
func TestStartServerDown(t *testing.T) {
	t.Parallel()
	pg, err := postgres.New(postgres.Config{})
	if err != nil {
		t.Fatal(err)
	}
	my, err := mysql.New(mysql.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dsn string
		st  core.Store
	}{
		{"postgres://u:s3cret@127.0.0.1:1/db?sslmode=disable", pg},
		{"u:s3cret@tcp(127.0.0.1:1)/db", my},
	} {
		db, err := store.Open(tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		var recs records
		ob, err := outbox.New(outbox.Config{DB: db, Store: tc.st, Registry: core.NewRegistry(), Logger: slog.New(&recs)})
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.Start(context.Background()); err != nil {
			t.Fatalf("%T: Start with the server down = %v, want nil", tc.st, err)
		}
		if err := ob.Close(context.Background()); err != nil {
			t.Logf("%T: Close: %v", tc.st, err) // releasing leases may fail too: the server is down
		}
		var lines []string
		for _, rec := range recs.list {
			if strings.Contains(rec.Message, "could not check") {
				line := rec.Message
				rec.Attrs(func(a slog.Attr) bool { line += " " + a.Key + "=" + a.Value.String(); return true })
				lines = append(lines, line)
			}
		}
		if len(lines) != 1 || !strings.Contains(lines[0], "table outbox_event") || !strings.Contains(lines[0], "127.0.0.1:1") ||
			strings.Contains(lines[0], "s3cret") {
			t.Errorf("%T: the check's log lines are %q; want one naming the table and 127.0.0.1:1, without the password", tc.st, lines)
		}
	}
}
