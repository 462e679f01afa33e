// Package docscheck keeps the repository's documentation honest. Its test
// (make docs-check, also part of make test) fails when:
//
//   - a Markdown file or a Go file dates a result by work item (the words
//     "session" or "issue" followed by a number): the documentation speaks
//     about the current state, and history lives in git;
//   - a relative link of a Markdown file, or its #anchor, points nowhere;
//   - a Go, YAML or SQL file names a docs/ page (docs/README.md, say)
//     that does not exist, or an anchor that page does not have;
//   - a page under docs/ cannot be reached from docs/README.md, the index,
//     by following links;
//   - the configuration reference (docs/configuration.md) does not name an
//     exported field of a public Config struct;
//   - a Go code block marked as a complete program does not build against
//     the working tree, or its tests fail.
//
// A program is one or more fenced code blocks whose info string is "go"
// followed by program=NAME, and optionally file=FILE (default main.go):
//
//	```go program=quickstart
//	package main
//	...
//	```
//
// Blocks with the same NAME in one Markdown file form one package main in a
// module of its own, built in a workspace with every module of the
// repository's go.work, so that it compiles against the code as it is, not
// against a published version. A program with _test.go files runs its tests.
// Test data (directories named testdata) is left out of every check.
package docscheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Problem is one thing the check found, at a file's line.
type Problem struct {
	File string // relative to the checked root
	Line int
	Msg  string
}

func (p Problem) String() string { return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg) }

// workItem matches a result dated by work item, as grep -iE
// '\bsession [0-9]|\bissue [0-9]' does.
var workItem = regexp.MustCompile(`(?i)\b(session|issue) [0-9]`)

// walk calls fn for every file under root whose name ends in one of exts,
// leaving out .git and every directory named testdata or node_modules.
func walk(root string, exts []string, fn func(rel string, data []byte) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (d.Name() == ".git" || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !slices.ContainsFunc(exts, func(e string) bool { return strings.HasSuffix(path, e) }) {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), data)
	})
}

// Mentions returns every line of a Markdown or Go file under root that dates
// something by work item.
func Mentions(root string) ([]Problem, error) {
	var out []Problem
	err := walk(root, []string{".md", ".go"}, func(rel string, data []byte) error {
		for i, line := range lines(data) {
			if m := workItem.FindString(line); m != "" {
				out = append(out, Problem{rel, i + 1, fmt.Sprintf("%q dates a result by work item: say what is true now (history belongs in git)", m)})
			}
		}
		return nil
	})
	return out, err
}

func lines(data []byte) []string {
	return strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
}

// mdLine is one line of a Markdown file outside fenced code blocks.
type mdLine struct {
	n    int // 1-based
	text string
}

// fence matches the opening or closing line of a fenced code block.
var fence = regexp.MustCompile("^ {0,3}(```+|~~~+)(.*)$")

// codeBlock is a fenced code block.
type codeBlock struct {
	line int // of the opening fence
	info string
	body string
}

// parseMarkdown splits a Markdown file into its lines outside fenced code
// blocks and its fenced code blocks.
func parseMarkdown(data []byte) (text []mdLine, blocks []codeBlock) {
	var (
		open  string // the fence of the open block; "" outside
		cur   codeBlock
		lines = lines(data)
		body  strings.Builder
	)
	for i, l := range lines {
		m := fence.FindStringSubmatch(l)
		switch {
		case open == "" && m != nil:
			open = m[1]
			cur = codeBlock{line: i + 1, info: strings.TrimSpace(m[2])}
			body.Reset()
		case open != "" && m != nil && strings.HasPrefix(m[1], open[:1]) && len(m[1]) >= len(open) && strings.TrimSpace(m[2]) == "":
			open = ""
			cur.body = body.String()
			blocks = append(blocks, cur)
		case open != "":
			// Code blocks in lists are indented; their content keeps its
			// indentation, which gofmt'd Go does not mind.
			body.WriteString(l)
			body.WriteByte('\n')
		default:
			text = append(text, mdLine{i + 1, l})
		}
	}
	return text, blocks
}

var (
	codeSpan    = regexp.MustCompile("``[^`]+``|`[^`]*`")
	inlineLink  = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refDef      = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)`)
	htmlRef     = regexp.MustCompile(`(?i)<(?:a|img)\s[^>]*?(?:href|src)="([^"]+)"`)
	htmlAnchor  = regexp.MustCompile(`(?i)<a\s[^>]*?(?:id|name)="([^"]+)"`)
	atxHeading  = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	scheme      = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

// links returns the link targets of a Markdown file's lines, with the line
// of each.
func links(text []mdLine) (out []mdLine) {
	for _, l := range text {
		s := codeSpan.ReplaceAllString(l.text, "")
		for _, m := range inlineLink.FindAllStringSubmatch(s, -1) {
			out = append(out, mdLine{l.n, m[1]})
		}
		for _, m := range htmlRef.FindAllStringSubmatch(s, -1) {
			out = append(out, mdLine{l.n, m[1]})
		}
		if m := refDef.FindStringSubmatch(s); m != nil {
			out = append(out, mdLine{l.n, m[1]})
		}
	}
	return out
}

// Anchors returns the anchors a Markdown file defines: GitHub's slug of each
// heading (lower case, punctuation but - and _ dropped, spaces made -, a
// repeated slug suffixed -1, -2, ...) and the id or name of each <a> tag.
func Anchors(data []byte) map[string]bool {
	text, _ := parseMarkdown(data)
	seen := map[string]int{}
	out := map[string]bool{}
	for _, l := range text {
		for _, m := range htmlAnchor.FindAllStringSubmatch(l.text, -1) {
			out[m[1]] = true
		}
		m := atxHeading.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := seen[s]; n > 0 {
			seen[s]++
			s = s + "-" + strconv.Itoa(n)
		} else {
			seen[s] = 1
		}
		out[s] = true
	}
	return out
}

// slug is GitHub's anchor of a heading's text.
func slug(heading string) string {
	heading = headingLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchorCache reads the anchors of each Markdown file once.
type anchorCache map[string]map[string]bool

func (c anchorCache) has(path, anchor string) (bool, error) {
	a, ok := c[path]
	if !ok {
		data, err := os.ReadFile(path)
		if err != nil {
			return false, err
		}
		a = Anchors(data)
		c[path] = a
	}
	return a[anchor], nil
}

// Links returns every relative link of a Markdown file under root that
// points nowhere: a missing file or directory, or an anchor the Markdown
// file it names does not define.
func Links(root string) ([]Problem, error) {
	cache := anchorCache{}
	var out []Problem
	err := walk(root, []string{".md"}, func(rel string, data []byte) error {
		text, _ := parseMarkdown(data)
		for _, l := range links(text) {
			msg, err := checkTarget(root, filepath.Dir(filepath.Join(root, rel)), filepath.Join(root, rel), l.text, cache)
			if err != nil {
				return err
			}
			if msg != "" {
				out = append(out, Problem{rel, l.n, msg})
			}
		}
		return nil
	})
	return out, err
}

// checkTarget checks one link target written in the file self, whose
// relative paths start at dir; it returns what is wrong, or "".
func checkTarget(root, dir, self, target string, cache anchorCache) (string, error) {
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "", nil // an absolute URL: not checked here
	}
	path, anchor, _ := strings.Cut(target, "#")
	path, _, _ = strings.Cut(path, "?")
	if p, err := url.PathUnescape(path); err == nil {
		path = p
	}
	full := self
	switch {
	case path == "":
	case strings.HasPrefix(path, "/"):
		full = filepath.Join(root, path)
	default:
		full = filepath.Join(dir, path)
	}
	if _, err := os.Stat(full); err != nil {
		return fmt.Sprintf("link %q: %s does not exist; fix the path, or the page it names moved", target, relTo(root, full)), nil
	}
	if anchor == "" || !strings.HasSuffix(full, ".md") {
		return "", nil
	}
	ok, err := cache.has(full, anchor)
	if err != nil {
		return "", err
	}
	if !ok {
		return fmt.Sprintf("link %q: %s has no heading or <a id> with anchor #%s", target, relTo(root, full), anchor), nil
	}
	return "", nil
}

func relTo(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil {
		return filepath.ToSlash(r)
	}
	return path
}

// docRef matches a docs/ page named in a Go file.
var docRef = regexp.MustCompile(`\bdocs/[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md(?:#[A-Za-z0-9_-]+)?`)

// DocRefs returns every docs/ page named in a Go, YAML or SQL file under
// root (a comment's pointer, a test that reads a page, an alert's
// description) that does not exist, or whose anchor the page does not
// define. Paths are taken from the repository root whatever the file's
// directory.
func DocRefs(root string) ([]Problem, error) {
	cache := anchorCache{}
	var out []Problem
	err := walk(root, []string{".go", ".yml", ".yaml", ".sql"}, func(rel string, data []byte) error {
		for i, line := range lines(data) {
			for _, ref := range docRef.FindAllString(line, -1) {
				msg, err := checkTarget(root, root, filepath.Join(root, "README.md"), ref, cache)
				if err != nil {
					return err
				}
				if msg != "" {
					out = append(out, Problem{rel, i + 1, msg})
				}
			}
		}
		return nil
	})
	return out, err
}

// Unindexed returns every Markdown page under root/docs that cannot be
// reached from root/docs/README.md by following relative links, so that
// the index lists every page (directly, or through a page it lists).
func Unindexed(root string) ([]Problem, error) {
	docs := filepath.Join(root, "docs")
	index := filepath.Join(docs, "README.md")
	if _, err := os.Stat(index); err != nil {
		return nil, nil
	}
	seen := map[string]bool{index: true}
	queue := []string{index}
	for len(queue) > 0 {
		page := queue[0]
		queue = queue[1:]
		data, err := os.ReadFile(page)
		if err != nil {
			return nil, err
		}
		text, _ := parseMarkdown(data)
		for _, l := range links(text) {
			if scheme.MatchString(l.text) || strings.HasPrefix(l.text, "#") {
				continue
			}
			path, _, _ := strings.Cut(l.text, "#")
			next := filepath.Join(filepath.Dir(page), path)
			if fi, err := os.Stat(next); err == nil && fi.IsDir() {
				next = filepath.Join(next, "README.md")
			}
			if !strings.HasSuffix(next, ".md") || seen[next] || !strings.HasPrefix(next, docs+string(filepath.Separator)) {
				continue
			}
			if _, err := os.Stat(next); err != nil {
				continue // Links reports it
			}
			seen[next] = true
			queue = append(queue, next)
		}
	}
	var out []Problem
	err := walk(docs, []string{".md"}, func(rel string, _ []byte) error {
		if !seen[filepath.Join(docs, filepath.FromSlash(rel))] {
			out = append(out, Problem{"docs/" + rel, 1, "no link leads here from docs/README.md: add the page to the index"})
		}
		return nil
	})
	return out, err
}

// Program is a Go program written in Markdown code blocks.
type Program struct {
	Name  string // program=NAME
	File  string // the Markdown file, relative to the root
	Line  int    // of its first block
	Files map[string]string
}

var (
	programAttr = regexp.MustCompile(`(?:^|\s)program=([A-Za-z0-9_-]+)`)
	fileAttr    = regexp.MustCompile(`(?:^|\s)file=([A-Za-z0-9_.-]+\.go)`)
)

// Programs returns the programs marked in the Markdown files under root, in
// file order, and a problem for each block whose marking is wrong.
func Programs(root string) ([]Program, []Problem, error) {
	var (
		progs []Program
		bad   []Problem
	)
	err := walk(root, []string{".md"}, func(rel string, data []byte) error {
		_, blocks := parseMarkdown(data)
		byName := map[string]int{}
		for _, b := range blocks {
			m := programAttr.FindStringSubmatch(b.info)
			if m == nil {
				continue
			}
			if lang, _, _ := strings.Cut(b.info, " "); lang != "go" {
				bad = append(bad, Problem{rel, b.line, fmt.Sprintf("block marked program=%s is not tagged go", m[1])})
				continue
			}
			file := "main.go"
			if f := fileAttr.FindStringSubmatch(b.info); f != nil {
				file = f[1]
			}
			i, ok := byName[m[1]]
			if !ok {
				i = len(progs)
				byName[m[1]] = i
				progs = append(progs, Program{Name: m[1], File: rel, Line: b.line, Files: map[string]string{}})
			}
			if _, dup := progs[i].Files[file]; dup {
				bad = append(bad, Problem{rel, b.line, fmt.Sprintf("program %s has two blocks for %s; name the second with file=", m[1], file)})
				continue
			}
			progs[i].Files[file] = b.body
		}
		return nil
	})
	return progs, bad, err
}

// Build builds each program in a module of its own inside a temporary
// workspace (under tmp) that uses every module of workRoot's go.work, then
// vets it and runs its tests when it has any; it returns a problem for each
// program that fails, with the go command's output.
func Build(ctx context.Context, workRoot, tmp string, progs []Program) ([]Problem, error) {
	if len(progs) == 0 {
		return nil, nil
	}
	goVersion, uses, replaces, err := workspace(ctx, workRoot)
	if err != nil {
		return nil, err
	}
	var work bytes.Buffer
	fmt.Fprintf(&work, "go %s\n\nuse (\n", goVersion)
	for _, u := range uses {
		fmt.Fprintf(&work, "\t%s\n", strconv.Quote(u))
	}
	dirs := make([]string, len(progs))
	for i, p := range progs {
		dirs[i] = filepath.Join(tmp, fmt.Sprintf("p%d-%s", i, p.Name))
		if err := os.MkdirAll(dirs[i], 0o755); err != nil {
			return nil, err
		}
		mod := fmt.Sprintf("module docs.example/%s\n\ngo %s\n", p.Name, goVersion)
		if err := os.WriteFile(filepath.Join(dirs[i], "go.mod"), []byte(mod), 0o644); err != nil {
			return nil, err
		}
		for name, src := range p.Files {
			if err := os.WriteFile(filepath.Join(dirs[i], name), []byte(src), 0o644); err != nil {
				return nil, err
			}
		}
		fmt.Fprintf(&work, "\t%s\n", strconv.Quote(dirs[i]))
	}
	work.WriteString(")\n")
	// go.work's replaces give the go command the go.mod of the versions the
	// modules require of each other, untagged yet.
	for _, r := range replaces {
		fmt.Fprintf(&work, "\nreplace %s\n", r)
	}
	workFile := filepath.Join(tmp, "go.work")
	if err := os.WriteFile(workFile, work.Bytes(), 0o644); err != nil {
		return nil, err
	}
	// The sums of the repository's workspace cover what its modules need.
	if sum, err := os.ReadFile(filepath.Join(workRoot, "go.work.sum")); err == nil {
		if err := os.WriteFile(workFile+".sum", sum, 0o644); err != nil {
			return nil, err
		}
	}
	env := append(os.Environ(), "GOWORK="+workFile, "GOFLAGS=", "GOTOOLCHAIN=local")
	var out []Problem
	for i, p := range progs {
		steps := [][]string{{"vet", "."}}
		if slices.ContainsFunc(keys(p.Files), func(f string) bool { return strings.HasSuffix(f, "_test.go") }) {
			steps = append(steps, []string{"test", "-count=1", "."})
		}
		for _, args := range steps {
			cmd := exec.CommandContext(ctx, "go", args...)
			cmd.Dir, cmd.Env = dirs[i], env
			if b, err := cmd.CombinedOutput(); err != nil {
				out = append(out, Problem{p.File, p.Line, fmt.Sprintf("program %s (files %s): go %s: %v\n%s",
					p.Name, strings.Join(keys(p.Files), ", "), strings.Join(args, " "), err, strings.TrimSpace(string(b)))})
				break
			}
		}
	}
	return out, nil
}

func keys(m map[string]string) []string {
	k := make([]string, 0, len(m))
	for f := range m {
		k = append(k, f)
	}
	sort.Strings(k)
	return k
}

// workspace returns the Go version, the absolute module directories and the
// replace directives (as "path version => dir", dir absolute) of root's
// go.work.
func workspace(ctx context.Context, root string) (string, []string, []string, error) {
	cmd := exec.CommandContext(ctx, "go", "work", "edit", "-json", filepath.Join(root, "go.work"))
	b, err := cmd.Output()
	if err != nil {
		return "", nil, nil, fmt.Errorf("read %s/go.work: %w", root, err)
	}
	type modVersion struct{ Path, Version string }
	var w struct {
		Go      string
		Use     []struct{ DiskPath string }
		Replace []struct{ Old, New modVersion }
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return "", nil, nil, fmt.Errorf("read %s/go.work: %w", root, err)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", nil, nil, err
	}
	var uses, replaces []string
	for _, u := range w.Use {
		uses = append(uses, filepath.Join(abs, u.DiskPath))
	}
	for _, r := range w.Replace {
		old := strings.TrimSpace(r.Old.Path + " " + r.Old.Version)
		if r.New.Version != "" { // a module, not a directory
			replaces = append(replaces, old+" => "+r.New.Path+" "+r.New.Version)
			continue
		}
		dir := r.New.Path
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(abs, dir)
		}
		replaces = append(replaces, old+" => "+strconv.Quote(dir))
	}
	return w.Go, uses, replaces, nil
}

// configTypes are the struct types, besides those named Config or ending in
// Config, whose fields the configuration reference lists.
var configTypes = map[string]bool{"Partitions": true, "ExponentialBackoff": true}

// skipConfigDirs are the directories whose Config structs are not a user's:
// internal packages, benchmarks, samples, commands, CI tools.
var skipConfigDirs = []string{"internal", "bench", "samples", "cmd", ".ci"}

// ConfigFields returns a problem for every public Config struct of a
// non-test Go file under root (package.Type) that the page at root/page does
// not name, and for every exported field of it that the page does not name
// in backticks (`Field`, or `x.Field` as in `dispatch.Config.Workers`).
func ConfigFields(root, page string) ([]Problem, error) {
	doc, err := os.ReadFile(filepath.Join(root, page))
	if err != nil {
		return nil, err
	}
	text := string(doc)
	named := func(field string) bool {
		return strings.Contains(text, "`"+field+"`") || strings.Contains(text, "."+field+"`")
	}
	var out []Problem
	err = walk(root, []string{".go"}, func(rel string, data []byte) error {
		if strings.HasSuffix(rel, "_test.go") || slices.ContainsFunc(strings.Split(rel, "/"), func(dir string) bool {
			return slices.Contains(skipConfigDirs, dir)
		}) {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, rel, data, parser.SkipObjectResolution)
		if err != nil {
			return fmt.Errorf("parse %s: %w", rel, err)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				name := ts.Name.Name
				if !ok || !ast.IsExported(name) || !(strings.HasSuffix(name, "Config") || configTypes[name]) {
					continue
				}
				qualified := f.Name.Name + "." + name
				line := fset.Position(ts.Pos()).Line
				if !strings.Contains(text, qualified) {
					out = append(out, Problem{rel, line, fmt.Sprintf("%s is not in %s: add a section for it", qualified, page)})
					continue
				}
				for _, fld := range st.Fields.List {
					for _, n := range fld.Names {
						if ast.IsExported(n.Name) && !named(n.Name) {
							out = append(out, Problem{rel, fset.Position(n.Pos()).Line,
								fmt.Sprintf("%s.%s is not in %s: add it with its default and when to change it", qualified, n.Name, page)})
						}
					}
				}
			}
		}
		return nil
	})
	return out, err
}
