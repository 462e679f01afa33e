package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/outboxkit/outbox/store/migrations"
)

func (a *app) migrate(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("migrate: give a subcommand: status, up, down or files")
	}
	switch args[0] {
	case "status":
		return a.migrateStatus(ctx, args[1:])
	case "up":
		return a.migrateUp(ctx, args[1:])
	case "down":
		return a.migrateDown(ctx, args[1:])
	case "files":
		return a.migrateFiles(args[1:])
	}
	return usagef("migrate: unknown subcommand %q (want status, up, down or files)", args[0])
}

// versionTableFlag adds --version-table.
func versionTableFlag(fs *flags) *string {
	return fs.String("version-table", "", "`table` of applied versions (default: the outbox table's name + _migration)")
}

// migrator connects and returns a Migrator on --table.
func (a *app) migrator(ctx context.Context, versionTable string) (context.Context, *session, *migrations.Migrator, error) {
	ctx, s, err := a.connect(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := migrations.New(migrations.Config{DB: s.db, Source: s.store, VersionTable: versionTable, Now: a.now})
	if err != nil {
		_ = s.Close()
		return nil, nil, nil, &usageError{msg: err.Error()}
	}
	return ctx, s, m, nil
}

// statusJSON is migrate status --json.
type statusJSON struct {
	Table        string        `json:"table"`
	VersionTable string        `json:"version_table"`
	Current      int64         `json:"current"`
	Latest       int64         `json:"latest"`
	Applied      []appliedJSON `json:"applied"`
	Pending      []string      `json:"pending"`
}

// appliedJSON is an applied version in migrate status --json.
type appliedJSON struct {
	Version   int64     `json:"version"`
	Name      string    `json:"name"`
	AppliedAt time.Time `json:"applied_at"`
}

func (a *app) migrateStatus(ctx context.Context, args []string) error {
	fs := a.command("migrate status")
	vt := versionTableFlag(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("migrate status: unexpected argument %q", fs.Arg(0))
	}
	ctx, s, m, err := a.migrator(ctx, *vt)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out := statusJSON{Table: st.Table, VersionTable: st.VersionTable, Current: st.Current, Latest: st.Latest,
			Applied: []appliedJSON{}, Pending: []string{}}
		for _, ap := range st.Applied {
			out.Applied = append(out.Applied, appliedJSON{Version: ap.Version, Name: ap.Name, AppliedAt: ap.AppliedAt})
		}
		for _, p := range st.Pending {
			out.Pending = append(out.Pending, p.FileName())
		}
		return writeJSON(a.stdout, out)
	}
	w := a.stdout
	fmt.Fprintf(w, "table          %s\n", st.Table)
	fmt.Fprintf(w, "version_table  %s\n", st.VersionTable)
	fmt.Fprintf(w, "current        %d\n", st.Current)
	fmt.Fprintf(w, "latest         %d\n", st.Latest)
	for _, ap := range st.Applied {
		fmt.Fprintf(w, "applied  %04d_%s  %s\n", ap.Version, ap.Name, ap.AppliedAt.UTC().Format(textTime))
	}
	for _, p := range st.Pending {
		fmt.Fprintf(w, "pending  %s\n", p.FileName())
	}
	return nil
}

// toFlag adds --to.
func toFlag(fs *flags, usage string) *string {
	return fs.String("to", "", usage)
}

func parseVersion(cmd, s string) (int64, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, usagef("%s: --to %q is not a version number", cmd, s)
	}
	return v, nil
}

func (a *app) migrateUp(ctx context.Context, args []string) error {
	fs := a.command("migrate up")
	vt := versionTableFlag(fs)
	to := toFlag(fs, "apply up to this `version` (default: the latest)")
	dryRun := fs.Bool("dry-run", false, "print the migrations up would apply and exit 0, changing nothing")
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("migrate up: unexpected argument %q", fs.Arg(0))
	}
	var target int64
	if *to != "" {
		v, err := parseVersion("migrate up", *to)
		if err != nil {
			return err
		}
		target = v
	}
	ctx, s, m, err := a.migrator(ctx, *vt)
	if err != nil {
		return err
	}
	defer s.Close()
	if *dryRun {
		st, err := m.Status(ctx)
		if err != nil {
			return err
		}
		for _, p := range st.Pending {
			if target == 0 || p.Version <= target {
				fmt.Fprintf(a.stdout, "would apply %s\n", p.FileName())
			}
		}
		fmt.Fprintln(a.stderr, "outboxctl: dry run; nothing changed")
		return nil
	}
	applied, err := m.Up(ctx, target)
	for _, mg := range applied {
		fmt.Fprintf(a.stdout, "applied %s\n", mg.FileName())
	}
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Fprintln(a.stdout, "up to date")
	}
	return nil
}

func (a *app) migrateDown(ctx context.Context, args []string) error {
	fs := a.command("migrate down")
	vt := versionTableFlag(fs)
	to := toFlag(fs, "revert every migration above this `version` (required; 0 drops the table and its events)")
	yes, dryRun := confirmFlags(fs)
	if err := fs.parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("migrate down: unexpected argument %q", fs.Arg(0))
	}
	if *to == "" {
		return usagef("migrate down: give --to VERSION (0 reverts everything and drops the table)")
	}
	target, err := parseVersion("migrate down", *to)
	if err != nil {
		return err
	}
	ctx, s, m, err := a.migrator(ctx, *vt)
	if err != nil {
		return err
	}
	defer s.Close()
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	planned := 0
	for i := len(st.Applied) - 1; i >= 0; i-- {
		ap := st.Applied[i]
		if ap.Version <= target {
			break
		}
		note := ""
		if ap.Version == 1 {
			note = "  (drops the table " + st.Table + " and every event in it)"
		}
		fmt.Fprintf(a.stdout, "would revert %04d_%s%s\n", ap.Version, ap.Name, note)
		planned++
	}
	if planned == 0 {
		fmt.Fprintf(a.stdout, "nothing to revert: the current version is %d\n", st.Current)
		return nil
	}
	if ok, err := a.confirmed(*yes, *dryRun); !ok {
		return err
	}
	reverted, err := m.Down(ctx, target)
	for _, mg := range reverted {
		fmt.Fprintf(a.stdout, "reverted %s\n", mg.FileName())
	}
	return err
}

func (a *app) migrateFiles(args []string) error {
	cmd := a.command("migrate files")
	format := cmd.String("format", "", "goose or golang-migrate (required)")
	out := cmd.String("out", "", "write the files into this `directory`, creating it (required)")
	if err := cmd.parse(args); err != nil {
		return err
	}
	dialect, err := a.dialectArg("migrate files", cmd)
	if err != nil {
		return err
	}
	if *out == "" {
		return usagef("migrate files: give --out DIR")
	}
	st, err := newStore(dialect, a.g.table)
	if err != nil {
		return err
	}
	var fsys fs.FS
	switch *format {
	case "goose":
		fsys, err = migrations.Goose(st)
	case "golang-migrate":
		fsys, err = migrations.GolangMigrate(st)
	default:
		return usagef("migrate files: --format %q: want goose or golang-migrate", *format)
	}
	if err != nil {
		return err
	}
	return writeFiles(a, fsys, *out)
}

// writeFiles copies the files of fsys into dir, naming each on stdout, and
// refuses to overwrite a file that differs.
func writeFiles(a *app, fsys fs.FS, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return err
	}
	for _, e := range entries {
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return err
		}
		path := filepath.Join(dir, e.Name())
		if old, err := os.ReadFile(path); err == nil && string(old) != string(body) {
			return fmt.Errorf("%s exists with other content; remove it or choose another --out", path)
		}
		if err := os.WriteFile(path, body, 0o644); err != nil {
			return err
		}
		fmt.Fprintln(a.stdout, path)
	}
	return nil
}

// dialectArg returns the database named by the only positional argument,
// or by --dsn without one.
func (a *app) dialectArg(cmd string, fs *flags) (string, error) {
	switch fs.NArg() {
	case 0:
		if a.g.dsn == "" {
			return "", usagef("%s: name the database (postgres, mysql or sqlite) or give --dsn", cmd)
		}
		d, _, err := parseDSN(a.g.dsn)
		return d, err
	case 1:
		if fs.Arg(0) == "postgresql" {
			return dialectPostgres, nil
		}
		return fs.Arg(0), nil
	}
	return "", usagef("%s: one database at most", cmd)
}
