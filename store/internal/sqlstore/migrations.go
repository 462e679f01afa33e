package sqlstore

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/outboxkit/outbox/store/migrations"
)

// MigrationTemplate is one version of a dialect's migrations before it is
// rendered for a table (see RenderDDL).
type MigrationTemplate struct {
	Version  int64
	Name     string
	Up, Down string
}

var migrationFileRE = regexp.MustCompile(`^([0-9]{4})_([a-z0-9_]+)\.(up|down)\.sql$`)

// ParseMigrations reads the migration templates in dir of fsys: for each
// version a pair NNNN_name.up.sql and NNNN_name.down.sql, numbered 0001,
// 0002, ... without gaps. Any other file, a missing half of a pair or a gap
// is an error.
func ParseMigrations(fsys fs.FS, dir string) ([]MigrationTemplate, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	byVersion := map[int64]*MigrationTemplate{}
	for _, e := range entries {
		m := migrationFileRE.FindStringSubmatch(e.Name())
		if m == nil || e.IsDir() {
			return nil, fmt.Errorf("migrations: %s: want files named NNNN_name.up.sql and NNNN_name.down.sql", e.Name())
		}
		version, _ := strconv.ParseInt(m[1], 10, 64)
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		t := byVersion[version]
		if t == nil {
			t = &MigrationTemplate{Version: version, Name: m[2]}
			byVersion[version] = t
		}
		if t.Name != m[2] {
			return nil, fmt.Errorf("migrations: version %d is named both %s and %s", version, t.Name, m[2])
		}
		if m[3] == "up" {
			t.Up = string(body)
		} else {
			t.Down = string(body)
		}
	}
	out := make([]MigrationTemplate, len(byVersion))
	for i := range out {
		t := byVersion[int64(i+1)]
		switch {
		case t == nil:
			return nil, fmt.Errorf("migrations: version %04d is missing (versions run 0001 to %04d without gaps)", i+1, len(out))
		case len(SplitStatements(t.Up)) == 0 || len(SplitStatements(t.Down)) == 0:
			return nil, fmt.Errorf("migrations: version %04d (%s) needs statements in both its .up.sql and its .down.sql", t.Version, t.Name)
		}
		out[i] = *t
	}
	return out, nil
}

// MustParseMigrations is ParseMigrations for the templates a store embeds:
// they are checked by its tests, so an error is a bug and panics.
func MustParseMigrations(fsys fs.FS, dir string) []MigrationTemplate {
	ts, err := ParseMigrations(fsys, dir)
	if err != nil {
		panic(err)
	}
	return ts
}

// Migrations returns the dialect's migrations rendered for the store's
// table, oldest first. Each script is its statements, without the
// templates' comments, each ending with ";" and a newline.
func (s *Store) Migrations() []migrations.Migration {
	out := make([]migrations.Migration, len(s.d.Migrations))
	for i, t := range s.d.Migrations {
		out[i] = migrations.Migration{Version: t.Version, Name: t.Name, Up: s.renderScript(t.Up), Down: s.renderScript(t.Down)}
	}
	return out
}

func (s *Store) renderScript(tmpl string) string {
	return strings.Join(SplitStatements(RenderDDL(tmpl, s.table, s.d.Quote)), ";\n\n") + ";\n"
}
