package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// repo writes files (path: content) under a new directory and returns it.
func repo(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// published is a tree whose modules follow every rule.
func published() map[string]string {
	return map[string]string{
		"go.mod":                 "module example.com/lib\n\ngo 1.25.0\n",
		"lib.go":                 "package lib\n",
		"internal/x/x.go":        "package x\n",
		"broker/nats/go.mod":     "module example.com/lib/broker/nats\n\ngo 1.25.0\n\nrequire example.com/lib v0.3.0\n",
		"broker/nats/nats.go":    "package nats\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/lib\"\n)\n\nvar _ = fmt.Sprint(lib.X)\n",
		"broker/nats/x_test.go":  "package nats\n\nimport \"example.com/lib/internal/x\"\n",
		"samples/app/go.mod":     "module example.com/lib/samples/app\n\ngo 1.25.0\n\nrequire (\n\texample.com/lib v0.3.0\n\texample.com/lib/broker/nats v0.3.0\n)\n",
		"samples/app/main.go":    "package main\n\nimport _ \"example.com/lib/internal/x\"\n\nfunc main() {}\n",
		"broker/nats/testdata/a": "not Go",
	}
}

func load(t *testing.T, root string) []*mod {
	t.Helper()
	mods, err := loadModules(root)
	if err != nil {
		t.Fatal(err)
	}
	return mods
}

func TestCheckPasses(t *testing.T) {
	root := repo(t, published())
	mods := load(t, root)
	if got := len(mods); got != 3 || mods[0].dir != "." {
		t.Fatalf("loadModules: %d modules, first %q; want 3, the root first", got, mods[0].dir)
	}
	v, err := check(root, mods, nil)
	if err != nil || v != "v0.3.0" {
		t.Fatalf("check = %q, %v; want v0.3.0, nil", v, err)
	}
}

// Each rule fails alone, naming the file and the way out.
func TestCheckFails(t *testing.T) {
	for name, tc := range map[string]struct {
		file, content string
		want          []string
	}{
		"replace": {"broker/nats/go.mod", "module example.com/lib/broker/nats\n\ngo 1.25.0\n\nrequire example.com/lib v0.3.0\n\nreplace example.com/lib => ../..\n",
			[]string{"broker/nats/go.mod: replace example.com/lib => ../..", "go.work joins the modules"}},
		"placeholder": {"broker/nats/go.mod", "module example.com/lib/broker/nats\n\ngo 1.25.0\n\nrequire example.com/lib v0.0.0-00010101000000-000000000000\n",
			[]string{"broker/nats/go.mod: require example.com/lib v0.0.0-00010101000000-000000000000", "make release VERSION="}},
		"two versions": {"broker/nats/go.mod", "module example.com/lib/broker/nats\n\ngo 1.25.0\n\nrequire example.com/lib v0.2.0\n",
			[]string{"different versions", "v0.2.0: broker/nats requires example.com/lib"}},
		"internal import": {"broker/nats/nats.go", "package nats\n\nimport \"example.com/lib/internal/x\"\n",
			[]string{"broker/nats/nats.go: example.com/lib/internal/x", "export what it needs"}},
	} {
		t.Run(name, func(t *testing.T) {
			files := published()
			files[tc.file] = tc.content
			root := repo(t, files)
			_, err := check(root, load(t, root), nil)
			if err == nil {
				t.Fatal("check passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestAllowInternal(t *testing.T) {
	files := published()
	files["broker/nats/nats.go"] = "package nats\n\nimport \"example.com/lib/internal/x\"\n"
	root := repo(t, files)
	if _, err := check(root, load(t, root), []string{"example.com/lib/internal/..."}); err != nil {
		t.Fatal(err)
	}
}

func TestReleaseAndOrder(t *testing.T) {
	files := published()
	files["go.work"] = "go 1.25.0\n\nuse (\n\t.\n\t./broker/nats\n\t./samples/app\n)\n"
	root := repo(t, files)
	if err := release(root, load(t, root), "v0.4.0"); err != nil {
		t.Fatal(err)
	}
	mods := load(t, root)
	for _, m := range mods {
		for _, r := range m.file.Require {
			if r.Mod.Version != "v0.4.0" {
				t.Errorf("%s requires %s %s after release v0.4.0", m.dir, r.Mod.Path, r.Mod.Version)
			}
		}
	}
	work, _ := os.ReadFile(filepath.Join(root, "go.work"))
	for _, w := range []string{"example.com/lib v0.4.0 => ./", "example.com/lib/broker/nats v0.4.0 => ./broker/nats"} {
		if !strings.Contains(string(work), w) {
			t.Errorf("go.work lacks %q:\n%s", w, work)
		}
	}
	var order []string
	for _, m := range releaseOrder(mods) {
		order = append(order, m.dir)
	}
	if !slices.Equal(order, []string{".", "broker/nats"}) {
		t.Errorf("release order %q, want the root, then broker/nats (samples are not published)", order)
	}
	// Again: nothing changes.
	if err := release(root, mods, "v0.4.0"); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(filepath.Join(root, "go.work"))
	if string(again) != string(work) {
		t.Errorf("a second release changed go.work:\n%s", again)
	}
	if err := release(root, mods, "v0.4"); err == nil {
		t.Error("release v0.4 passed")
	}
}

func TestWithoutOwnSums(t *testing.T) {
	mods := load(t, repo(t, published()))
	sum := "example.com/lib v0.3.0 h1:x=\nexample.com/lib v0.3.0/go.mod h1:y=\nexample.com/library v1.0.0 h1:z=\ngolang.org/x/mod v0.40.0 h1:w=\n"
	want := "example.com/library v1.0.0 h1:z=\ngolang.org/x/mod v0.40.0 h1:w=\n"
	if got := string(withoutOwnSums([]byte(sum), mods)); got != want {
		t.Errorf("withoutOwnSums = %q, want %q", got, want)
	}
}

func TestGoImports(t *testing.T) {
	dir := t.TempDir()
	src := "// Package p.\npackage p\n\nimport \"a\"\nimport b \"b\"\n\nimport (\n\t\"c\"\n\t_ \"d\" // why\n)\n\nfunc f() { _ = \"import (\" }\n"
	f := filepath.Join(dir, "p.go")
	if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := goImports(f)
	if err != nil || !slices.Equal(got, []string{"a", "b", "c", "d"}) {
		t.Errorf("goImports = %q, %v", got, err)
	}
}
