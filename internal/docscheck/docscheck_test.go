package docscheck

import (
	"context"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the repository's root, two directories up.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestRepository runs every check on the repository itself.
func TestRepository(t *testing.T) {
	root := repoRoot(t)
	report := func(name string, ps []Problem, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, p := range ps {
			t.Errorf("%s: %s", name, p)
		}
	}
	ps, err := Mentions(root)
	report("work-item mention", ps, err)
	ps, err = Links(root)
	report("broken link", ps, err)
	ps, err = DocRefs(root)
	report("a file names a missing docs page", ps, err)
	ps, err = Unindexed(root)
	report("page missing from the index", ps, err)
	ps, err = ConfigFields(root, "docs/configuration.md")
	report("configuration reference incomplete", ps, err)

	progs, ps, err := Programs(root)
	report("program marking", ps, err)
	// The README's quick start and the getting-started guide must stay
	// marked: without a marker nothing would be built, and the check would
	// pass on code that no longer compiles.
	for _, page := range []string{"README.md", "docs/getting-started.md"} {
		if !slices.ContainsFunc(progs, func(p Program) bool { return p.File == page }) {
			t.Errorf("%s has no Go block marked as a complete program (```go program=NAME)", page)
		}
	}
	if testing.Short() {
		t.Skipf("-short: %d programs not built", len(progs))
	}
	ps, err = Build(context.Background(), root, t.TempDir(), progs)
	report("program does not build", ps, err)
	t.Logf("%d programs checked: %s", len(progs), names(progs))
}

func names(progs []Program) string {
	var s []string
	for _, p := range progs {
		s = append(s, p.File+":"+p.Name)
	}
	return strings.Join(s, ", ")
}

// TestCatchesPlantedProblems runs the checks on testdata/tree, where a
// problem of every kind is planted, and expects each reported at its line,
// and nothing else.
func TestCatchesPlantedProblems(t *testing.T) {
	tree := filepath.Join("testdata", "tree")
	got := func(ps []Problem, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var s []string
		for _, p := range ps {
			s = append(s, p.File+":"+strconv.Itoa(p.Line))
		}
		return s
	}
	cases := []struct {
		name string
		got  []string
		want []string
	}{
		{"mentions", got(Mentions(tree)), []string{"README.md:5", "pkg/pkg.go:3"}},
		{"links", got(Links(tree)), []string{"README.md:7", "README.md:8", "README.md:9"}},
		{"doc refs", got(DocRefs(tree)), []string{"pkg/pkg.go:2", "pkg/pkg.go:2", "pkg/rules.yml:2"}},
		{"unindexed", got(Unindexed(tree)), []string{path.Join("docs", "orphan.md") + ":1"}},
		{"config fields", got(ConfigFields(tree, path.Join("docs", "page.md"))), []string{"pkg/pkg.go:9", "pkg/pkg.go:14"}},
	}
	for _, c := range cases {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: reported at %v, want %v", c.name, c.got, c.want)
		}
	}
	ps, err := Links(tree)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"missing.md does not exist", "no heading or <a id> with anchor #no-such-heading", "anchor #nowhere"} {
		if !slices.ContainsFunc(ps, func(p Problem) bool { return strings.Contains(p.Msg, want) }) {
			t.Errorf("no link problem says %q: %v", want, ps)
		}
	}

	progs, bad, err := Programs(tree)
	if err != nil || len(bad) > 0 {
		t.Fatalf("programs: %v, %v", bad, err)
	}
	if len(progs) != 2 || progs[0].Name != "good" || progs[1].Name != "bad" {
		t.Fatalf("programs found: %+v", progs)
	}
	if testing.Short() {
		t.Skip("-short: programs not built")
	}
	ps, err = Build(context.Background(), repoRoot(t), t.TempDir(), progs)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Line != 19 || !strings.Contains(ps[0].Msg, "undefined: undefined") {
		t.Errorf("build problems: %v, want one for program bad at README.md:19 naming undefined", ps)
	}
}

// TestSlug checks the anchors GitHub gives headings.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"W1 live: 16 writers":                   "w1-live-16-writers",
		"`make test` on 2 cores":                "make-test-on-2-cores",
		"Outbox to broker (JetStream, AMQP)":    "outbox-to-broker-jetstream-amqp",
		"The [link](x.md) text":                 "the-link-text",
		"snake_case and dash-ed":                "snake_case-and-dash-ed",
		"Ordered delivery: 0.82x on PostgreSQL": "ordered-delivery-082x-on-postgresql",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
	a := Anchors([]byte("# A\n\n## A\n\n```\n# not a heading\n```\n<a id=\"x\"></a>\n"))
	for _, want := range []string{"a", "a-1", "x"} {
		if !a[want] {
			t.Errorf("anchor %q missing from %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a line in a code block was taken for a heading")
	}
}
