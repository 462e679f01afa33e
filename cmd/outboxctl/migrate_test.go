package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/outboxkit/outbox/internal/testsupport/testdb"
	"github.com/outboxkit/outbox/store/migrations"
)

// TestMigrate: status, up and down on a table that does not exist yet, and
// up over a table CreateSchema made.
func TestMigrate(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		table := testdb.UniqueName("mig")
		st, err := tg.NewStore(table)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx := context.Background()
			_ = testdb.DropTable(ctx, tg.DB, st)
			for _, tb := range []string{table, tg.Table} {
				_, _ = tg.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+migrations.DefaultVersionTable(tb))
			}
		})
		run := func(args ...string) result {
			return cli(t, nil, append([]string{"--dsn", tg.dsn, "--table", table}, args...)...)
		}
		out := run("migrate", "status").want(t, exitOK).stdout
		mustContain(t, out, "current        0")
		mustContain(t, out, "pending  0001_create_table")
		mustContain(t, run("migrate", "up", "--dry-run").want(t, exitOK).stdout, "would apply 0001_create_table")
		if tableExists(t, tg, table) {
			t.Fatal("--dry-run made the table")
		}
		mustContain(t, run("migrate", "up").want(t, exitOK).stdout, "applied 0001_create_table")
		mustContain(t, run("migrate", "up").want(t, exitOK).stdout, "up to date")
		var status statusJSON
		if err := json.Unmarshal([]byte(run("migrate", "status", "--json").want(t, exitOK).stdout), &status); err != nil {
			t.Fatal(err)
		}
		if status.Current != status.Latest || status.Current < 1 || len(status.Applied) != int(status.Latest) ||
			status.Applied[0].Name != "create_table" || status.Applied[0].AppliedAt.IsZero() ||
			len(status.Pending) != 0 || status.VersionTable != migrations.DefaultVersionTable(st.Table()) {
			t.Fatalf("status after up: %+v", status)
		}
		run("stats").want(t, exitOK) // the migrated table works

		// down needs --to, and --yes to change anything.
		run("migrate", "down").want(t, exitUsage)
		plan := run("migrate", "down", "--to", "0").want(t, exitConfirm).stdout
		mustContain(t, plan, "would revert 0001_create_table  (drops the table")
		if !tableExists(t, tg, table) {
			t.Fatal("down without --yes dropped the table")
		}
		run("migrate", "down", "--to", "0", "--dry-run").want(t, exitOK)
		mustContain(t, run("migrate", "down", "--to", "0", "--yes").want(t, exitOK).stdout, "reverted 0003_position", "reverted 0002_ordering", "reverted 0001_create_table")
		if tableExists(t, tg, table) {
			t.Fatal("down --to 0 --yes left the table")
		}
		mustContain(t, run("migrate", "down", "--to", "0").want(t, exitOK).stdout, "nothing to revert")

		// A table made by CreateSchema comes under control.
		mustContain(t, tg.run(t, "migrate", "up").want(t, exitOK).stdout, "applied 0001_create_table")
		mustContain(t, tg.run(t, "migrate", "status").want(t, exitOK).stdout, "applied  0001_create_table")
	})
}

func tableExists(t *testing.T, tg target, table string) bool {
	t.Helper()
	rows, err := tg.DB.QueryContext(testCtx(t), "SELECT 1 FROM "+table+" WHERE 1 = 0")
	if err != nil {
		return false
	}
	_ = rows.Close()
	return true
}

// TestMigrateFiles: the files for a tool's command line, rendered for
// --table, without a database.
func TestMigrateFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		format string
		files  []string
	}{
		{"goose", []string{"0001_create_table.sql", "0002_ordering.sql", "0003_position.sql"}},
		{"golang-migrate", []string{"0001_create_table.down.sql", "0001_create_table.up.sql", "0002_ordering.down.sql", "0002_ordering.up.sql",
			"0003_position.down.sql", "0003_position.up.sql"}},
	} {
		dir := filepath.Join(t.TempDir(), "outbox")
		cli(t, nil, "--table", "orders_outbox", "migrate", "files", "--format", tc.format, "--out", dir, "postgres").want(t, exitOK)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			mustContain(t, string(b), `"orders_outbox"`)
		}
		if !slices.Equal(names, tc.files) {
			t.Fatalf("%s files: %v, want %v", tc.format, names, tc.files)
		}
		// Again into the same directory: the same content is no conflict.
		cli(t, nil, "--table", "orders_outbox", "migrate", "files", "--format", tc.format, "--out", dir, "postgres").want(t, exitOK)
		// Another table's files would overwrite them: refused.
		cli(t, nil, "--table", "other", "migrate", "files", "--format", tc.format, "--out", dir, "postgres").want(t, exitError)
	}
	cli(t, nil, "migrate", "files", "--format", "flyway", "--out", t.TempDir(), "postgres").want(t, exitUsage)
	cli(t, nil, "migrate", "files", "--format", "goose", "postgres").want(t, exitUsage)
	cli(t, nil, "migrate", "frobnicate").want(t, exitUsage)
}
