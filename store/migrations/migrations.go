package migrations

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"
)

// Migration is one versioned change of an outbox table's schema, rendered
// for one table in one dialect.
type Migration struct {
	// Version numbers the migrations 1, 2, 3, ... in the order they apply.
	Version int64
	// Name says what the migration does, in lower case and underscores,
	// e.g. "create_table".
	Name string
	// Up and Down are SQL scripts: statements each ending with a semicolon
	// at the end of a line. Down undoes Up.
	Up, Down string
}

// FileName returns the migration's file name without extension:
// "0001_create_table".
func (m Migration) FileName() string { return fmt.Sprintf("%04d_%s", m.Version, m.Name) }

// Statements returns the statements of script (Up or Down) one by one,
// without their semicolons and without comment lines.
func Statements(script string) []string {
	var out []string
	for _, stmt := range strings.Split(script, ";\n") {
		var kept []string
		for _, l := range strings.Split(stmt, "\n") {
			if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "--") {
				kept = append(kept, l)
			}
		}
		if s := strings.TrimSuffix(strings.TrimSpace(strings.Join(kept, "\n")), ";"); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Source is a store with versioned migrations: *postgres.Store, *mysql.Store
// and *sqlite.Store.
type Source interface {
	// Table returns the table the migrations create and change,
	// schema-qualified when it has a schema.
	Table() string
	// Migrations returns the migrations of that table, oldest first.
	Migrations() []Migration
}

// ExistsReporter is implemented by a Source whose database lacks IF NOT
// EXISTS for some statements of its migrations (ADD COLUMN and CREATE INDEX
// on MySQL 8, ADD COLUMN on SQLite). The Migrator then skips an up
// statement that fails because what it adds is already there, so that a
// table the store's CreateSchema made, which is already at the latest
// version, comes under its control as it does on the other databases.
type ExistsReporter interface {
	// AlreadyExists reports whether err says a column or index a statement
	// adds exists already.
	AlreadyExists(err error) bool
}

// Goose returns src's migrations as goose reads them: one file per version,
// NNNN_name.sql, with -- +goose Up and -- +goose Down sections. Pass it to
// goose.NewProvider (or goose.SetBaseFS). It returns an error when src's
// migrations are not numbered 1, 2, 3, ....
func Goose(src Source) (fs.FS, error) {
	ms, err := checked(src)
	if err != nil {
		return nil, err
	}
	files := make(map[string]string, len(ms))
	for _, m := range ms {
		files[m.FileName()+".sql"] = header(m, src.Table()) + "-- +goose Up\n" + m.Up + "\n-- +goose Down\n" + m.Down
	}
	return newMemFS(files), nil
}

// GolangMigrate returns src's migrations as golang-migrate reads them: two
// files per version, NNNN_name.up.sql and NNNN_name.down.sql. Pass it to
// golang-migrate's iofs.New(fsys, "."). It returns an error when src's
// migrations are not numbered 1, 2, 3, ....
func GolangMigrate(src Source) (fs.FS, error) {
	ms, err := checked(src)
	if err != nil {
		return nil, err
	}
	files := make(map[string]string, 2*len(ms))
	for _, m := range ms {
		files[m.FileName()+".up.sql"] = header(m, src.Table()) + m.Up
		files[m.FileName()+".down.sql"] = header(m, src.Table()) + m.Down
	}
	return newMemFS(files), nil
}

// header is the comment every rendered file starts with.
func header(m Migration, table string) string {
	return fmt.Sprintf("-- outbox migration %04d %s, for the table %s.\n"+
		"-- Rendered from the store's templates; see github.com/outboxkit/outbox/store/migrations.\n",
		m.Version, m.Name, table)
}

// checked returns src's migrations after checking that they are numbered
// from 1 without gaps, are named, and have both directions.
func checked(src Source) ([]Migration, error) {
	ms := src.Migrations()
	for i, m := range ms {
		switch {
		case m.Version != int64(i+1):
			return nil, fmt.Errorf("migrations of %s: version %d at position %d, want %d", src.Table(), m.Version, i+1, i+1)
		case !validName(m.Name):
			return nil, fmt.Errorf("migrations of %s: version %d: name %q must be lower case letters, digits and underscores", src.Table(), m.Version, m.Name)
		case len(Statements(m.Up)) == 0 || len(Statements(m.Down)) == 0:
			return nil, fmt.Errorf("migrations of %s: version %d: up and down must both have statements", src.Table(), m.Version)
		}
	}
	return ms, nil
}

func validName(s string) bool {
	if s == "" || len(s) > 100 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
			return false
		}
	}
	return true
}

// memFS is a read-only directory of files held in memory. The standard
// library's in-memory FS lives in testing/fstest, which is for tests.
type memFS struct {
	files map[string]string
	names []string // sorted
}

func newMemFS(files map[string]string) *memFS {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	return &memFS{files: files, names: names}
}

var (
	_ fs.ReadDirFS  = (*memFS)(nil)
	_ fs.ReadFileFS = (*memFS)(nil)
)

// epoch is every file's modification time: the files never change.
var epoch = time.Unix(0, 0).UTC()

func (m *memFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return &memDir{fsys: m}, nil
	}
	content, ok := m.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memFile{info: fileInfo{name: name, size: int64(len(content))}, r: strings.NewReader(content)}, nil
}

func (m *memFS) ReadFile(name string) ([]byte, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: fs.ErrInvalid}
	}
	content, ok := m.files[name]
	if !ok {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: fs.ErrNotExist}
	}
	return []byte(content), nil
}

func (m *memFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if name != "." {
		if _, ok := m.files[name]; ok {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
		}
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	out := make([]fs.DirEntry, len(m.names))
	for i, n := range m.names {
		out[i] = fs.FileInfoToDirEntry(fileInfo{name: n, size: int64(len(m.files[n]))})
	}
	return out, nil
}

type fileInfo struct {
	name string
	size int64
	dir  bool
}

func (fi fileInfo) Name() string { return path.Base(fi.name) }
func (fi fileInfo) Size() int64  { return fi.size }
func (fi fileInfo) Mode() fs.FileMode {
	if fi.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}
func (fi fileInfo) ModTime() time.Time { return epoch }
func (fi fileInfo) IsDir() bool        { return fi.dir }
func (fi fileInfo) Sys() any           { return nil }

type memFile struct {
	info fileInfo
	r    *strings.Reader
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *memFile) Close() error               { return nil }

// memDir is the root directory, opened.
type memDir struct {
	fsys *memFS
	next int // entries ReadDir has returned
}

func (d *memDir) Stat() (fs.FileInfo, error) { return fileInfo{name: ".", dir: true}, nil }
func (d *memDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: ".", Err: fs.ErrInvalid}
}
func (d *memDir) Close() error { return nil }

func (d *memDir) ReadDir(n int) ([]fs.DirEntry, error) {
	all, _ := d.fsys.ReadDir(".")
	rest := all[d.next:]
	if n <= 0 {
		d.next = len(all)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	rest = rest[:min(n, len(rest))]
	d.next += len(rest)
	return rest, nil
}
