// Command modtool keeps the repository's Go modules releasable: fetchable by
// a user as published modules are, without the go.work that joins them while
// we develop.
//
// Usage (the Makefile's consumer-test, tidy, tidy-check, release and the
// solo-module targets run it from the repository's root):
//
//	modtool check                 the committed go.mod files' rules (below)
//	modtool consumer [-keep]      check, then the consumer test (below)
//	modtool proxy -o DIR [-version V]
//	                              a file module proxy (GOPROXY=file://DIR) of the working tree
//	modtool tidy [-diff]          go mod tidy in every module, offline of a published tag
//	modtool release VERSION       set every cross-module require to VERSION, print the tags
//	modtool exec DIR -- CMD...    run CMD in module DIR (one go.work leaves out) in a
//	                              workspace of DIR and the repository's modules it requires
//
// The rules of check: no go.mod has a replace directive (a user's build
// ignores the replace directives of its dependencies, so a module that needs
// one cannot be fetched); every require of one of the repository's modules
// names a released version (no pseudo-version such as the placeholder
// v0.0.0-00010101000000-000000000000), the same one everywhere; and no
// published module's code (test files aside) imports an internal package of
// another module, which would bind the two to ship in lockstep with no
// stated contract (-allow-internal lists the imports still tolerated).
//
// The consumer test builds a file module proxy from the working tree at a
// test version (every cross-module require rewritten to it, zips made with
// golang.org/x/mod/zip), then, in a scratch module outside the repository,
// with GOWORK=off, no replace, GOFLAGS=-mod=mod and a module cache of its
// own, runs go get of the root module and every published nested module at
// that version and builds and runs a program importing every public package
// of them. Last it runs go build ./... in every module of the repository,
// published or not, as unpacked from the proxy, with GOWORK=off, and go vet
// ./... in the published ones (which compiles their tests too).
//
// A module is published unless it lives under bench/, samples/ or internal/
// (programs and tools) or its directory's name ends in "test" (the tests of
// another module, such as broker/kafka/kfaketest).
package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// testVersion is the version the consumer test publishes the working tree
// at: a prerelease no tag will take, served only by its own proxy.
const testVersion = "v0.0.0-consumertest"

func main() {
	root := flag.String("C", ".", "the repository's root directory")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: modtool [-C root] check|consumer|proxy|tidy|release|exec ... (see the package comment)")
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	abs, err := filepath.Abs(*root)
	if err == nil {
		err = run(abs, flag.Arg(0), flag.Args()[1:])
	}
	var exit exitError
	switch {
	case errors.As(err, &exit):
		os.Exit(int(exit))
	case err != nil:
		fmt.Fprintln(os.Stderr, "modtool:", err)
		os.Exit(1)
	}
}

// exitError is the exit code of a command modtool exec ran.
type exitError int

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func run(root, cmd string, args []string) error {
	mods, err := loadModules(root)
	if err != nil {
		return err
	}
	flags := flag.NewFlagSet(cmd, flag.ExitOnError)
	allow := flags.String("allow-internal", "", "comma-separated internal import paths (or path/... prefixes) a published module may still import")
	switch cmd {
	case "check":
		flags.Parse(args)
		_, err := check(root, mods, split(*allow))
		return err
	case "consumer":
		keep := flags.Bool("keep", false, "keep the scratch directory")
		flags.Parse(args)
		return consumer(root, mods, split(*allow), *keep)
	case "proxy":
		out := flags.String("o", "", "the proxy's directory (GOPROXY=file://DIR)")
		version := flags.String("version", testVersion, `the version to publish every module at; "checkout": a pseudo-version of the commit checked out`)
		flags.Parse(args)
		if *out == "" {
			return errors.New("proxy: -o DIR is required")
		}
		if *version == "checkout" {
			v, err := checkoutVersion(root)
			if err != nil {
				return err
			}
			*version = v
		}
		if err := writeProxy(root, mods, *version, *out); err != nil {
			return err
		}
		abs, _ := filepath.Abs(*out)
		fmt.Printf("A module proxy of this checkout, every module at %s, is in %s. In your module:\n\n"+
			"\texport GOPROXY=file://%s,https://proxy.golang.org GONOSUMDB=github.com/outboxkit\n"+
			"\tgo get github.com/outboxkit/outbox github.com/outboxkit/outbox/broker/jetstream ... (the modules you use)\n",
			*version, abs, filepath.ToSlash(abs))
		return nil
	case "tidy":
		diff := flags.Bool("diff", false, "change nothing: print what go mod tidy would change and fail if anything")
		flags.Parse(args)
		return tidy(root, mods, *diff)
	case "release":
		flags.Parse(args)
		if flags.NArg() != 1 {
			return errors.New("usage: modtool release vX.Y.Z")
		}
		return release(root, mods, flags.Arg(0))
	case "exec":
		flags.Parse(args)
		if flags.NArg() < 2 {
			return errors.New("usage: modtool exec DIR -- CMD [ARG...]")
		}
		return execIn(root, mods, flags.Arg(0), flags.Args()[1:])
	}
	return fmt.Errorf("unknown command %q", cmd)
}

func split(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

// A mod is one module of the repository.
type mod struct {
	dir  string // slash-separated, relative to the root: "." or "broker/jetstream"
	path string
	data []byte // go.mod
	file *modfile.File
}

// unpublished says why the module is not published, or "".
func (m *mod) unpublished() string {
	for _, p := range []string{"bench/", "samples/", "internal/"} {
		if strings.HasPrefix(m.dir+"/", p) {
			return "a program or tool under " + strings.TrimSuffix(p, "/")
		}
	}
	if strings.HasSuffix(path.Base(m.dir), "test") {
		return "the tests of another module"
	}
	return ""
}

// loadModules finds every go.mod under root, the root's first.
func loadModules(root string) ([]*mod, error) {
	var mods []*mod
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || name != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(p, data, nil)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(p))
		mods = append(mods, &mod{dir: filepath.ToSlash(rel), path: f.Module.Mod.Path, data: data, file: f})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(mods, func(a, b *mod) int {
		return cmp.Or(-cmp.Compare(boolInt(a.dir == "."), boolInt(b.dir == ".")), cmp.Compare(a.dir, b.dir))
	})
	if len(mods) == 0 || mods[0].dir != "." {
		return nil, fmt.Errorf("%s: no go.mod at the root", root)
	}
	return mods, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// byPath returns the repository's module of path, or nil.
func byPath(mods []*mod, p string) *mod {
	for _, m := range mods {
		if m.path == p {
			return m
		}
	}
	return nil
}

// owner returns the module whose package importPath is (the longest module
// path that is a prefix of it), or nil when none of the repository's.
func owner(mods []*mod, importPath string) *mod {
	var best *mod
	for _, m := range mods {
		if (importPath == m.path || strings.HasPrefix(importPath, m.path+"/")) && (best == nil || len(m.path) > len(best.path)) {
			best = m
		}
	}
	return best
}

// check applies the rules of the go.mod files and the internal imports. It
// returns the version every cross-module require names.
func check(root string, mods []*mod, allow []string) (string, error) {
	var replaces, unreleased, mixed []string
	versions := map[string][]string{} // version -> "dir requires path"
	for _, m := range mods {
		gomod := path.Join(m.dir, "go.mod")
		for _, r := range m.file.Replace {
			replaces = append(replaces, fmt.Sprintf("%s: replace %s => %s", gomod, r.Old.Path, r.New.Path))
		}
		for _, r := range m.file.Require {
			if byPath(mods, r.Mod.Path) == nil {
				continue
			}
			v := r.Mod.Version
			if module.IsPseudoVersion(v) || semver.Prerelease(v) != "" || semver.Build(v) != "" || !semver.IsValid(v) {
				unreleased = append(unreleased, fmt.Sprintf("%s: require %s %s", gomod, r.Mod.Path, v))
				continue
			}
			versions[v] = append(versions[v], m.dir+" requires "+r.Mod.Path)
		}
	}
	if len(versions) > 1 {
		for v, who := range versions {
			mixed = append(mixed, fmt.Sprintf("%s: %s", v, strings.Join(who, ", ")))
		}
		slices.Sort(mixed)
	}
	var version string
	for v := range versions {
		version = v
	}
	internal, tolerated, tests, err := internalImports(root, mods, allow)
	if err != nil {
		return "", err
	}
	for _, imp := range tolerated {
		fmt.Fprintln(os.Stderr, "modtool: tolerated for now (-allow-internal):", imp)
	}
	if tests > 0 {
		fmt.Fprintf(os.Stderr, "modtool: %d test files of published modules import the root module's test support (internal/testsupport): "+
			"tests build against the root at the version they require\n", tests)
	}
	var report strings.Builder
	n := 0
	for _, group := range []struct {
		lines []string
		why   string
	}{
		{replaces, "replace directives: a user's build ignores those of its dependencies, so a module that needs one cannot be fetched. " +
			"Remove them: go.work joins the modules while you develop (modtool exec runs a module go.work leaves out)"},
		{unreleased, "requires of a version no module proxy serves (a pseudo-version or the placeholder): require a released version; " +
			"make release VERSION=vX.Y.Z sets every cross-module require"},
		{mixed, "the cross-module requires name different versions; the modules are released together: make release VERSION=vX.Y.Z sets them all"},
		{internal, "a published module imports another module's internal package, so the two must ship in lockstep: export what it needs " +
			"in a package whose API is kept, or give it a module of its own"},
	} {
		if len(group.lines) == 0 {
			continue
		}
		n += len(group.lines)
		fmt.Fprintf(&report, "\n%s:\n\t%s", group.why, strings.Join(group.lines, "\n\t"))
	}
	if n > 0 {
		return "", fmt.Errorf("the modules cannot be fetched as a user fetches them (%d problems)%s", n, report.String())
	}
	fmt.Printf("modtool: %d modules: no replace, every cross-module require at %s, no internal import across modules\n",
		len(mods), cmp.Or(version, "(none)"))
	return version, nil
}

// internalImports returns the imports of another module's internal
// package by the non-test files of published modules ("file: import"), those
// allow tolerates, and the number of test files that import one.
func internalImports(root string, mods []*mod, allow []string) (bad, tolerated []string, tests int, err error) {
	files, err := moduleFiles(root, mods)
	if err != nil {
		return nil, nil, 0, err
	}
	for _, m := range mods {
		if m.unpublished() != "" {
			continue
		}
		for _, rel := range files[m] {
			if !strings.HasSuffix(rel, ".go") || strings.Contains("/"+rel, "/testdata/") {
				continue
			}
			imports, err := goImports(filepath.Join(root, m.dir, rel))
			if err != nil {
				return nil, nil, 0, err
			}
			for _, imp := range imports {
				o := owner(mods, imp)
				if o == nil || o == m || !slices.Contains(strings.Split(strings.TrimPrefix(imp, o.path), "/"), "internal") {
					continue
				}
				where := path.Join(m.dir, rel) + ": " + imp
				switch {
				case strings.HasSuffix(rel, "_test.go"):
					tests++
				case slices.ContainsFunc(allow, func(a string) bool {
					p, all := strings.CutSuffix(a, "/...")
					return imp == p || all && strings.HasPrefix(imp, p+"/")
				}):
					tolerated = append(tolerated, where)
				default:
					bad = append(bad, where)
				}
			}
		}
	}
	return bad, tolerated, tests, nil
}

// moduleFiles returns the files of each module, relative to its directory:
// what git lists (tracked, and untracked but not ignored) when root is a git
// work tree, else every file; a nested module's files are its own.
func moduleFiles(root string, mods []*mod) (map[*mod][]string, error) {
	var all []string
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err == nil {
		for _, f := range strings.Split(string(out), "\x00") {
			// A file in conflict is listed once per stage.
			if f != "" && (len(all) == 0 || all[len(all)-1] != f) {
				all = append(all, f)
			}
		}
	} else {
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == ".git" {
				return filepath.SkipDir
			}
			if !d.IsDir() {
				rel, _ := filepath.Rel(root, p)
				all = append(all, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	files := map[*mod][]string{}
	for _, f := range all {
		fi, err := os.Lstat(filepath.Join(root, f))
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted from the work tree, or a symbolic link
		}
		var best *mod
		for _, m := range mods {
			if (m.dir == "." || strings.HasPrefix(f, m.dir+"/")) && (best == nil || len(m.dir) > len(best.dir) || best.dir == ".") {
				best = m
			}
		}
		rel := f
		if best.dir != "." {
			rel = strings.TrimPrefix(f, best.dir+"/")
		}
		files[best] = append(files[best], rel)
	}
	return files, nil
}

// goImports returns the import paths of a Go file, read from its import
// declarations without a full parse.
func goImports(file string) ([]string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var imports []string
	inBlock := false
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case inBlock && line == ")":
			inBlock = false
		case inBlock:
			if q := quoted(line); q != "" {
				imports = append(imports, q)
			}
		case line == "import (":
			inBlock = true
		case strings.HasPrefix(line, "import "):
			if q := quoted(line); q != "" {
				imports = append(imports, q)
			}
		case strings.HasPrefix(line, "func ") || strings.HasPrefix(line, "type ") || strings.HasPrefix(line, "var ") || strings.HasPrefix(line, "const "):
			return imports, nil
		}
	}
	return imports, nil
}

func quoted(line string) string {
	i := strings.IndexByte(line, '"')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(line[i+1:], '"')
	if j < 0 {
		return ""
	}
	return line[i+1 : i+1+j]
}

// checkoutVersion returns the pseudo-version of the commit checked out in
// root (v0.0.0-yyyymmddhhmmss-abcdefabcdef), which no tag will take: a
// proxy of the checkout serves it, and a later commit has another.
func checkoutVersion(root string) (string, error) {
	out, err := exec.Command("git", "-C", root, "log", "-1", "--format=%ct %H").Output()
	if err != nil {
		return "", fmt.Errorf("the commit checked out: %w", err)
	}
	var unix int64
	var hash string
	if _, err := fmt.Sscan(string(out), &unix, &hash); err != nil || len(hash) < 12 {
		return "", fmt.Errorf("the commit checked out: git log printed %q", out)
	}
	return module.PseudoVersion("v0", "", time.Unix(unix, 0), hash[:12]), nil
}

// withRequires returns m's go.mod with every require of one of mods at
// version.
func withRequires(m *mod, mods []*mod, version string) ([]byte, error) {
	f, err := modfile.Parse(m.dir+"/go.mod", m.data, nil)
	if err != nil {
		return nil, err
	}
	changed := false
	for _, r := range f.Require {
		if byPath(mods, r.Mod.Path) != nil && r.Mod.Version != version {
			if err := f.AddRequire(r.Mod.Path, version); err != nil {
				return nil, err
			}
			changed = true
		}
	}
	if !changed {
		return m.data, nil
	}
	f.Cleanup()
	return f.Format()
}

// writeProxy writes a file module proxy serving every module of the
// working tree at version, each go.mod's cross-module requires rewritten to
// it.
func writeProxy(root string, mods []*mod, version, dir string) error {
	if !semver.IsValid(version) {
		return fmt.Errorf("%q is not a semantic version", version)
	}
	files, err := moduleFiles(root, mods)
	if err != nil {
		return err
	}
	when := time.Now().UTC().Truncate(time.Second)
	if t, err := module.PseudoVersionTime(version); err == nil {
		when = t
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, when})
	for _, m := range mods {
		gomod, err := withRequires(m, mods, version)
		if err != nil {
			return err
		}
		escaped, err := module.EscapePath(m.path)
		if err != nil {
			return err
		}
		vdir := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			return err
		}
		var zfiles []zip.File
		for _, rel := range files[m] {
			if rel == "go.mod" {
				continue
			}
			zfiles = append(zfiles, diskFile{rel: rel, abs: filepath.Join(root, m.dir, filepath.FromSlash(rel))})
		}
		zfiles = append(zfiles, memFile{rel: "go.mod", data: gomod})
		z, err := os.Create(filepath.Join(vdir, version+".zip"))
		if err != nil {
			return err
		}
		if err := zip.Create(z, module.Version{Path: m.path, Version: version}, zfiles); err != nil {
			z.Close()
			return fmt.Errorf("zip %s: %w", m.path, err)
		}
		if err := z.Close(); err != nil {
			return err
		}
		// @latest answers go get without a version when the list holds no
		// release (a pseudo-version is never listed).
		for name, data := range map[string][]byte{"@v/" + version + ".mod": gomod, "@v/" + version + ".info": info,
			"@v/list": []byte(version + "\n"), "@latest": info} {
			if err := os.WriteFile(filepath.Join(vdir, "..", filepath.FromSlash(name)), data, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

type diskFile struct{ rel, abs string }

func (f diskFile) Path() string                 { return f.rel }
func (f diskFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.abs) }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.abs) }

type memFile struct {
	rel  string
	data []byte
}

func (f memFile) Path() string                 { return f.rel }
func (f memFile) Lstat() (os.FileInfo, error)  { return memInfo{f}, nil }
func (f memFile) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(f.data)), nil }

type memInfo struct{ f memFile }

func (i memInfo) Name() string       { return path.Base(i.f.rel) }
func (i memInfo) Size() int64        { return int64(len(i.f.data)) }
func (i memInfo) Mode() fs.FileMode  { return 0o644 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }

// scratch is a directory outside the repository with a file proxy of the
// working tree and a module cache of its own, and the environment that
// fetches from them.
type scratch struct {
	dir, proxy string
	env        []string
}

// newScratch writes the proxy at version. Its module cache is its own, so
// that the working tree published at a version never enters the user's
// cache; the user's cache of downloads is a second proxy, so that what it
// holds is not fetched again.
func newScratch(root string, mods []*mod, version string) (*scratch, error) {
	dir, err := os.MkdirTemp("", "outbox-modules-")
	if err != nil {
		return nil, err
	}
	s := &scratch{dir: dir, proxy: filepath.Join(dir, "proxy")}
	if err := writeProxy(root, mods, version, s.proxy); err != nil {
		s.remove()
		return nil, err
	}
	goenv := func(name string) string {
		out, _ := exec.Command("go", "env", name).Output()
		return strings.TrimSpace(string(out))
	}
	proxy := "file://" + filepath.ToSlash(s.proxy)
	if cache := goenv("GOMODCACHE"); cache != "" {
		proxy += ",file://" + filepath.ToSlash(filepath.Join(cache, "cache", "download"))
	}
	if p := goenv("GOPROXY"); p != "" && p != "off" {
		proxy += "," + p
	}
	set := map[string]string{
		"GOWORK": "off",
		// -trimpath keeps the scratch directory's name out of the build
		// cache's keys, so that a second run compiles only what changed.
		"GOFLAGS":     strings.TrimSpace(goenv("GOFLAGS") + " -mod=mod -modcacherw -trimpath"),
		"GOPROXY":     proxy,
		"GONOSUMDB":   strings.Trim(goenv("GONOSUMDB")+",github.com/outboxkit", ","),
		"GOMODCACHE":  filepath.Join(dir, "modcache"),
		"GOTOOLCHAIN": "local",
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); set[k] == "" {
			s.env = append(s.env, kv)
		}
	}
	for k, v := range set {
		s.env = append(s.env, k+"="+v)
	}
	return s, nil
}

func (s *scratch) remove() { _ = os.RemoveAll(s.dir) }

// goCmd runs go with args in dir, its output to ours, and says so first.
func (s *scratch) goCmd(dir string, args ...string) error {
	fmt.Printf("(cd %s && go %s)\n", dir, strings.Join(args, " "))
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, s.env, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (in %s): %w", strings.Join(args, " "), dir, err)
	}
	return nil
}

func (s *scratch) goOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir, cmd.Env, cmd.Stderr = dir, s.env, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s (in %s): %w", strings.Join(args, " "), dir, err)
	}
	return string(out), nil
}

// unpack extracts m's zip from the proxy into dir.
func (s *scratch) unpack(m *mod, version, dir string) error {
	escaped, _ := module.EscapePath(m.path)
	return zip.Unzip(dir, module.Version{Path: m.path, Version: version},
		filepath.Join(s.proxy, filepath.FromSlash(escaped), "@v", version+".zip"))
}

func consumer(root string, mods []*mod, allow []string, keep bool) error {
	if _, err := check(root, mods, allow); err != nil {
		return err
	}
	s, err := newScratch(root, mods, testVersion)
	if err != nil {
		return err
	}
	if keep {
		fmt.Println("modtool: scratch directory kept:", s.dir)
	} else {
		defer s.remove()
	}
	fmt.Printf("modtool: file proxy of the working tree at %s: GOPROXY=file://%s\n", testVersion, s.proxy)

	// A user's module: go get of every published module, then a program
	// importing every public package of them.
	app := filepath.Join(s.dir, "consumer")
	if err := os.MkdirAll(app, 0o755); err != nil {
		return err
	}
	gomod := fmt.Sprintf("module example.com/outboxconsumer\n\ngo %s\n", mods[0].file.Go.Version)
	if err := os.WriteFile(filepath.Join(app, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	get := []string{"get"}
	var published []*mod
	for _, m := range mods {
		if m.unpublished() == "" {
			published = append(published, m)
			get = append(get, m.path+"@"+testVersion)
		}
	}
	if err := s.goCmd(app, get...); err != nil {
		return err
	}
	var patterns []string
	for _, m := range published {
		patterns = append(patterns, m.path+"/...")
	}
	out, err := s.goOutput(app, append([]string{"list", "-e", "-f", "{{.ImportPath}} {{.Name}} {{if .Error}}error{{end}}"}, patterns...)...)
	if err != nil {
		return err
	}
	var imports []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || f[1] == "main" || slices.Contains(strings.Split(f[0], "/"), "internal") {
			continue
		}
		if !slices.Contains(imports, f[0]) {
			imports = append(imports, f[0])
		}
	}
	var prog strings.Builder
	prog.WriteString("// The consumer test's program: it imports every public package of the published modules.\npackage main\n\nimport (\n\t\"fmt\"\n\n")
	for _, imp := range imports {
		fmt.Fprintf(&prog, "\t_ %q\n", imp)
	}
	fmt.Fprintf(&prog, ")\n\nfunc main() { fmt.Println(\"consumer: %d packages of %d modules at %s\") }\n", len(imports), len(published), testVersion)
	if err := os.WriteFile(filepath.Join(app, "main.go"), []byte(prog.String()), 0o644); err != nil {
		return err
	}
	if err := s.goCmd(app, "build", "-o", "consumer", "."); err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(app, "consumer"))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("consumer program: %w", err)
	}

	// Every module as published, built alone.
	for _, m := range mods {
		dir := filepath.Join(s.dir, "modules", filepath.FromSlash(m.dir))
		if err := s.unpack(m, testVersion, dir); err != nil {
			return err
		}
		if err := s.goCmd(dir, "build", "./..."); err != nil {
			return err
		}
		if m.unpublished() != "" {
			continue
		}
		// A published module's tests, too, build as published.
		if err := s.goCmd(dir, "vet", "./..."); err != nil {
			return err
		}
	}
	fmt.Printf("modtool: consumer test passed: go get of %d published modules at %s, %d packages imported; "+
		"with GOWORK=off, go build ./... of %d modules and go vet ./... of the published ones\n",
		len(published), testVersion, len(imports), len(mods))
	return nil
}

// repoVersion returns the one version every cross-module require names.
func repoVersion(mods []*mod) (string, error) {
	version := ""
	for _, m := range mods {
		for _, r := range m.file.Require {
			if byPath(mods, r.Mod.Path) == nil {
				continue
			}
			if version != "" && r.Mod.Version != version {
				return "", fmt.Errorf("the cross-module requires name %s and %s; run modtool check", version, r.Mod.Version)
			}
			version = r.Mod.Version
		}
	}
	return cmp.Or(version, testVersion), nil
}

// tidy runs go mod tidy on a copy of every module as published at the
// version the go.mod files require, served by a file proxy of the working
// tree, so that it works before that version is tagged. The go.sum files
// keep no line of the repository's own modules: their hashes would be those
// of the working tree, not of the tags; go.work serves them.
func tidy(root string, mods []*mod, diffOnly bool) error {
	version, err := repoVersion(mods)
	if err != nil {
		return err
	}
	s, err := newScratch(root, mods, version)
	if err != nil {
		return err
	}
	defer s.remove()
	untidy := 0
	for _, m := range mods {
		dir := filepath.Join(s.dir, "tidy", filepath.FromSlash(m.dir))
		if err := s.unpack(m, version, dir); err != nil {
			return err
		}
		fmt.Printf("go mod tidy (%s)\n", m.dir)
		cmd := exec.Command("go", "mod", "tidy")
		cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, s.env, os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go mod tidy (%s): %w", m.dir, err)
		}
		for _, name := range []string{"go.mod", "go.sum"} {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if name == "go.sum" {
				got = withoutOwnSums(got, mods)
			}
			file := filepath.Join(root, filepath.FromSlash(m.dir), name)
			have, err := os.ReadFile(file)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if bytes.Equal(got, have) {
				continue
			}
			if !diffOnly {
				if len(got) == 0 {
					err = os.Remove(file)
				} else {
					err = os.WriteFile(file, got, 0o644)
				}
				if err != nil {
					return err
				}
				continue
			}
			untidy++
			fmt.Printf("%s/%s is not tidy (- committed, + go mod tidy's):\n", m.dir, name)
			tidied := filepath.Join(s.dir, "tidied")
			_ = os.WriteFile(tidied, got, 0o644)
			diff := exec.Command("diff", "-u", file, tidied)
			diff.Stdout, diff.Stderr = os.Stdout, os.Stderr
			_ = diff.Run()
		}
	}
	if untidy > 0 {
		return fmt.Errorf("%d go.mod/go.sum files are not tidy: run make tidy", untidy)
	}
	return nil
}

// withoutOwnSums drops the go.sum lines of the repository's modules.
func withoutOwnSums(sum []byte, mods []*mod) []byte {
	var out []byte
	for _, line := range bytes.SplitAfter(sum, []byte("\n")) {
		if f := strings.Fields(string(line)); len(f) > 0 && byPath(mods, f[0]) != nil {
			continue
		}
		out = append(out, line...)
	}
	return out
}

// release sets every cross-module require to version and prints the tags
// to push, the root's first.
func release(root string, mods []*mod, version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version || module.IsPseudoVersion(version) {
		return fmt.Errorf("release: %q is not a release version such as v0.2.0 (vMAJOR.MINOR.PATCH, optionally -prerelease)", version)
	}
	if semver.Major(version) != "v0" && semver.Major(version) != "v1" {
		return fmt.Errorf("release: %s needs /%s module paths first", version, semver.Major(version))
	}
	changed := 0
	for _, m := range mods {
		data, err := withRequires(m, mods, version)
		if err != nil {
			return err
		}
		if bytes.Equal(data, m.data) {
			continue
		}
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(m.dir), "go.mod"), data, 0o644); err != nil {
			return err
		}
		changed++
	}
	if err := writeWorkReplaces(root, mods, version); err != nil {
		return err
	}
	var tags []string
	for _, m := range releaseOrder(mods) {
		if m.dir == "." {
			tags = append(tags, version)
		} else {
			tags = append(tags, m.dir+"/"+version)
		}
	}
	fmt.Printf(`Every cross-module require is at %s (%d go.mod files changed).
Next: make tidy-check, make consumer-test; commit ("release %s"); then tag
that commit and push the tags in this order (a module's tag after those of
the modules it requires):

`, version, changed, version)
	for _, t := range tags {
		fmt.Printf("\tgit tag %s\n", t)
	}
	fmt.Printf("\tgit push origin %s\n", strings.Join(tags, " "))
	return nil
}

// required returns the repository's modules some module requires.
func required(mods []*mod) []*mod {
	var out []*mod
	for _, m := range mods {
		for _, r := range m.file.Require {
			if d := byPath(mods, r.Mod.Path); d != nil && !slices.Contains(out, d) {
				out = append(out, d)
			}
		}
	}
	slices.SortFunc(out, func(a, b *mod) int { return cmp.Compare(a.dir, b.dir) })
	return out
}

// writeWorkReplaces sets go.work's replace directives: one for each module
// another one requires, at version, to its directory. A workspace module
// takes the place of its required versions in the build, but the go command
// still reads the go.mod of the version required, which a proxy serves only
// once it is tagged; the replace gives it the working tree's. It touches
// no go.mod: a consumer never reads go.work.
func writeWorkReplaces(root string, mods []*mod, version string) error {
	file := filepath.Join(root, "go.work")
	data, err := os.ReadFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	w, err := modfile.ParseWork(file, data, nil)
	if err != nil {
		return err
	}
	for _, r := range slices.Clone(w.Replace) {
		if byPath(mods, r.Old.Path) != nil {
			if err := w.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return err
			}
		}
	}
	w.Cleanup()
	out := bytes.TrimRight(modfile.Format(w.Syntax), "\n")
	out = append(out, "\n\n// The versions the modules require of each other, served by their\n"+
		"// directories (make release writes these; see internal/modtool).\nreplace (\n"...)
	for _, m := range required(mods) {
		out = fmt.Appendf(out, "\t%s %s => %s\n", m.path, version, dirPath(m.dir))
	}
	out = append(out, ")\n"...)
	if bytes.Equal(out, data) {
		return nil
	}
	return os.WriteFile(file, out, 0o644)
}

// dirPath returns a replacement path for dir.
func dirPath(dir string) string {
	if dir == "." {
		return "./"
	}
	return "./" + dir
}

// releaseOrder returns the published modules, each after the repository's
// modules it requires.
func releaseOrder(mods []*mod) []*mod {
	var order []*mod
	done := map[*mod]bool{}
	var visit func(m *mod)
	visit = func(m *mod) {
		if done[m] {
			return
		}
		done[m] = true
		for _, r := range m.file.Require {
			if d := byPath(mods, r.Mod.Path); d != nil {
				visit(d)
			}
		}
		if m.unpublished() == "" {
			order = append(order, m)
		}
	}
	for _, m := range mods {
		if m.unpublished() == "" {
			visit(m)
		}
	}
	return order
}

// execIn runs args in module dir, in a workspace of its own: the module and
// the repository's modules it requires, directly or not, at the newest go
// version among them. It serves the modules go.work leaves out (one that
// needs a newer Go than the rest) as go.work serves the others.
func execIn(root string, mods []*mod, dir string, args []string) error {
	if args[0] == "--" {
		args = args[1:]
	}
	abs := dir
	if !filepath.IsAbs(dir) {
		abs = filepath.Join(root, dir) // relative to the repository's root
	}
	rel, err := filepath.Rel(root, abs)
	if err != nil {
		return err
	}
	var start *mod
	for _, m := range mods {
		if m.dir == filepath.ToSlash(rel) {
			start = m
		}
	}
	if start == nil {
		return fmt.Errorf("exec: %s is not a module directory of %s", dir, root)
	}
	use := []*mod{}
	seen := map[*mod]bool{}
	var visit func(m *mod)
	visit = func(m *mod) {
		if seen[m] {
			return
		}
		seen[m] = true
		use = append(use, m)
		for _, r := range m.file.Require {
			if d := byPath(mods, r.Mod.Path); d != nil {
				visit(d)
			}
		}
	}
	visit(start)
	goVersion := "1.21"
	var work strings.Builder
	for _, m := range use {
		if m.file.Go != nil && semver.Compare("v"+m.file.Go.Version, "v"+goVersion) > 0 {
			goVersion = m.file.Go.Version
		}
		fmt.Fprintf(&work, "\t%s\n", filepath.Join(root, filepath.FromSlash(m.dir)))
	}
	tmp, err := os.MkdirTemp("", "outbox-work-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	gowork := filepath.Join(tmp, "go.work")
	version, err := repoVersion(mods)
	if err != nil {
		return err
	}
	var replace strings.Builder
	for _, m := range required(use) {
		fmt.Fprintf(&replace, "\t%s %s => %s\n", m.path, version, filepath.Join(root, filepath.FromSlash(m.dir)))
	}
	text := fmt.Sprintf("go %s\n\nuse (\n%s)\n\nreplace (\n%s)\n", goVersion, work.String(), replace.String())
	if err := os.WriteFile(gowork, []byte(text), 0o644); err != nil {
		return err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir, cmd.Stdin, cmd.Stdout, cmd.Stderr = abs, os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "GOWORK="+gowork)
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return exitError(cmp.Or(ee.ExitCode(), 1))
		}
		return err
	}
	return nil
}
