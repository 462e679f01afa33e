package sqlgolden

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/outboxkit/outbox/store/migrations"
)

// MigrationDirs are the directories, under the dialect's migrations/, of
// the files each tool applies as they are, and how they are rendered.
var MigrationDirs = []struct {
	Dir    string
	Render func(migrations.Source) (fs.FS, error)
}{
	{"goose", migrations.Goose},
	{"golang-migrate", migrations.GolangMigrate},
}

// CheckMigrations compares the migration files of the tools in
// migrations/goose and migrations/golang-migrate with src's migrations
// rendered for them (src on the default table), or rewrites them under
// -update. A file in those directories that src does not render is an
// error too (or removed under -update).
func CheckMigrations(t *testing.T, src migrations.Source) {
	t.Helper()
	for _, d := range MigrationDirs {
		fsys, err := d.Render(src)
		if err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join("migrations", d.Dir)
		entries, err := fs.ReadDir(fsys, ".")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
			got, err := fs.ReadFile(fsys, e.Name())
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, e.Name())
			if *update {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				continue
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%v (go test -update writes it)", err)
				continue
			}
			if string(want) != string(got) {
				t.Errorf("%s differs from the templates it is rendered from; review the change and run go test -update.\ngot:\n%s\nwant:\n%s", path, got, want)
			}
		}
		onDisk, err := os.ReadDir(dir)
		if err != nil && !*update {
			t.Error(err)
		}
		for _, e := range onDisk {
			if slices.Contains(names, e.Name()) {
				continue
			}
			path := filepath.Join(dir, e.Name())
			if *update {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				continue
			}
			t.Errorf("%s is not rendered from any template: remove it, or run go test -update", path)
		}
	}
}
