package testsupport_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/outboxkit/outbox"

// drivers are the database drivers: only a store may import one, and only
// its own.
var drivers = []string{
	"github.com/jackc/pgx/...",
	"github.com/go-sql-driver/mysql/...",
	"modernc.org/sqlite/...",
	"github.com/lib/pq/...",
	"github.com/mattn/go-sqlite3/...",
}

// A layer is one rule of DESIGN.md section 3: no package matching subjects
// (and not except) depends, directly or through other packages, on one
// matching forbid that does not match allow. Patterns are import paths, or
// a path followed by "/..." for it and everything below it; "~" stands for
// the module's path.
type layer struct {
	rule             string
	subjects, except []string
	forbid, allow    []string
}

var layers = []layer{
	{
		rule: "core is the vocabulary: it imports no store, no driver, no dispatcher; nothing of the module but its internal " +
			"packages and outboxlog",
		subjects: []string{"~/core"},
		forbid:   append([]string{"~/..."}, drivers...),
		allow:    []string{"~/internal/...", "~/outboxlog"},
	},
	{
		rule:     "outboxlog, the logging vocabulary every package and nested module shares, imports nothing of the module",
		subjects: []string{"~/outboxlog"},
		forbid:   []string{"~/..."},
	},
	{
		rule:     "dispatch, poller, purge, dead and console import no store and no driver",
		subjects: []string{"~/dispatch", "~/poller", "~/purge", "~/dead", "~/console"},
		forbid:   append([]string{"~/store/..."}, drivers...),
	},
	store("postgres", "github.com/jackc/pgx/..."),
	store("mysql", "github.com/go-sql-driver/mysql/..."),
	store("sqlite", "modernc.org/sqlite/..."),
	{
		rule:     "the shared store base, its schema check and the migrations import core, and no store, dialect or driver",
		subjects: []string{"~/store/internal/sqlstore/...", "~/store/internal/schemacheck", "~/store/migrations"},
		forbid:   append([]string{"~/..."}, drivers...),
		allow:    []string{"~/core", "~/internal/...", "~/outboxlog", "~/store/internal/sqlstore/...", "~/store/migrations"},
	},
	{
		// A program that only publishes to (or consumes from) a broker
		// compiles that broker's client and no database driver: the inbox
		// tells the database from the driver's type name (internal/dbkind).
		rule:     "the inbox and the broker modules import no database driver",
		subjects: []string{"~/inbox", "~/internal/dbkind", "~/broker/..."},
		forbid:   drivers,
	},
	{
		rule:     "no library package imports the test support, which imports the dispatcher, the poller and every dialect",
		subjects: []string{"~/..."},
		except:   []string{"~/internal/testsupport/...", "~/bench/...", "~/reliability/..."},
		forbid:   []string{"~/internal/testsupport/..."},
	},
}

// store is the layer of store/name: it imports core, the shared store base
// (and its schema check) and its own driver, and no other store, driver or
// component.
func store(name, driver string) layer {
	return layer{
		rule:     "store/" + name + " imports core and its own driver, and no other store, driver or component",
		subjects: []string{"~/store/" + name},
		forbid:   append([]string{"~/..."}, drivers...),
		allow: []string{"~/core", "~/internal/...", "~/outboxlog", "~/store/internal/sqlstore/...", "~/store/internal/schemacheck",
			"~/store/migrations", driver},
	}
}

// TestLayering enforces the dependency direction of DESIGN.md section 3
// (and keeps the test support out of users' programs) for every package of
// every module go.work lists, through every path of imports: a forbidden
// package imported through another one fails as well, naming the path.
func TestLayering(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over every module")
	}
	pkgs := listPackages(t, module+"/...")
	for _, l := range layers {
		matched := 0
		for _, p := range pkgs {
			if p.DepOnly || !matchAny(l.subjects, p.ImportPath) || matchAny(l.except, p.ImportPath) {
				continue
			}
			matched++
			forbidden := func(dep string) bool { return matchAny(l.forbid, dep) && !matchAny(l.allow, dep) }
			for _, dep := range p.Deps {
				if !forbidden(dep) {
					continue
				}
				// Only the first forbidden package of a chain: what it
				// imports in turn is its own violation, or comes with it.
				chain := importPath(pkgs, p.ImportPath, dep)
				if slices.ContainsFunc(chain[1:len(chain)-1], func(c string) bool { return forbidden(expand(c)) }) {
					continue
				}
				t.Errorf("%s depends on %s (%s): %s",
					p.ImportPath, dep, strings.Join(chain, " -> "), l.rule)
			}
		}
		if matched == 0 {
			t.Errorf("no package is subject to the rule %q: a package was renamed or moved; mend the rule", l.rule)
		}
		t.Logf("%d packages checked: %s", matched, l.rule)
	}
}

// pkg is what TestLayering needs of go list -json.
type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
	DepOnly    bool
	Standard   bool
}

func listPackages(t *testing.T, pattern string) map[string]*pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Imports,Deps,DepOnly,Standard", pattern)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if !p.Standard {
			pkgs[p.ImportPath] = &p
		}
	}
	if n := len(pkgs); n < 40 {
		t.Fatalf("go list found %d packages, too few for the whole repository", n)
	}
	return pkgs
}

// importPath returns a shortest chain of imports from one package to
// another, both ends included, the module's path written "~".
func importPath(pkgs map[string]*pkg, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			var chain []string
			for p := to; p != ""; p = prev[p] {
				chain = append(chain, strings.Replace(p, module, "~", 1))
			}
			slices.Reverse(chain)
			return chain
		}
		if p := pkgs[cur]; p != nil {
			for _, imp := range p.Imports {
				if _, seen := prev[imp]; !seen {
					prev[imp] = cur
					queue = append(queue, imp)
				}
			}
		}
	}
	return []string{from, "?", to}
}

// expand undoes the "~" of a chain element.
func expand(path string) string { return strings.Replace(path, "~", module, 1) }

func matchAny(patterns []string, path string) bool {
	return slices.ContainsFunc(patterns, func(pattern string) bool {
		pattern = expand(pattern)
		if prefix, ok := strings.CutSuffix(pattern, "/..."); ok {
			return path == prefix || strings.HasPrefix(path, prefix+"/")
		}
		return path == pattern
	})
}
