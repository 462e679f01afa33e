// Command apilist writes the public API of every package of the
// repository's modules, one file per package, so that a change to the
// public surface shows in review as a change to a committed file.
//
// A package is public when it is not a command (package main) and no
// element of its import path is "internal". Its file, under the output
// directory, is named by its import path relative to the root module
// (api/core.txt, api/broker/rabbitmq.txt; the root package's is
// api/outbox.txt, after its last element), and lists what go doc -all would
// show without the comments: constants, variables, functions, then each
// type followed by its methods, each group sorted by name. Struct fields
// and interface methods that are not exported are left out, as go doc does.
// Packages that export nothing get no file.
//
// Usage (the Makefile's api and api-check targets):
//
//	apilist [-solo dir,...] outdir
//
// It runs go list in the current directory (the workspace's root module,
// which covers every module go.work lists) and, with GOWORK=off, in each
// -solo module directory. It removes the .txt files of outdir it did not
// write, so that a removed package loses its file.
package main

import (
	"bytes"
	"cmp"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/printer"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	solo := flag.String("solo", "", "comma-separated module directories outside go.work, listed with GOWORK=off")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: apilist [-solo dir,...] outdir")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(flag.Arg(0), strings.FieldsFunc(*solo, func(r rune) bool { return r == ',' || r == ' ' })); err != nil {
		fmt.Fprintln(os.Stderr, "apilist:", err)
		os.Exit(1)
	}
}

// pkg is one package as go list reports it.
type pkg struct {
	importPath, name, dir string
	files                 []string
}

func run(outDir string, soloDirs []string) error {
	root, err := goOutput("", false, "list", "-m", "-f", "{{if .Main}}{{.Path}} {{.Dir}}{{end}}")
	if err != nil {
		return err
	}
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	rootPath := ""
	for line := range strings.Lines(root) {
		p, dir, _ := strings.Cut(strings.TrimSpace(line), " ")
		if dir == cwd {
			rootPath = p
		}
	}
	if rootPath == "" {
		return fmt.Errorf("run apilist in the root module's directory (go list -m named no module at %s)", cwd)
	}
	pkgs, err := listPackages("", false, rootPath+"/...")
	if err != nil {
		return err
	}
	for _, dir := range soloDirs {
		more, err := listPackages(dir, true, "./...")
		if err != nil {
			return err
		}
		pkgs = append(pkgs, more...)
	}
	written := map[string]bool{}
	for _, p := range pkgs {
		if !public(p) {
			continue
		}
		text, err := listing(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p.importPath, err)
		}
		if text == nil {
			continue
		}
		rel := strings.TrimPrefix(p.importPath, rootPath+"/")
		if p.importPath == rootPath {
			rel = path.Base(rootPath)
		}
		if !strings.HasPrefix(p.importPath, rootPath) {
			return fmt.Errorf("package %s is outside the root module's path %s", p.importPath, rootPath)
		}
		file := filepath.Join(outDir, filepath.FromSlash(rel)+".txt")
		if written[file] {
			return fmt.Errorf("two packages map to %s", file)
		}
		written[file] = true
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(file, text, 0o644); err != nil {
			return err
		}
	}
	// Files of packages that no longer exist, or export nothing now.
	return filepath.WalkDir(outDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".txt") || written[p] {
			return err
		}
		return os.Remove(p)
	})
}

// public reports whether p is part of a module's public API.
func public(p pkg) bool {
	if p.name == "main" || len(p.files) == 0 {
		return false
	}
	return !slices.ContainsFunc(strings.Split(p.importPath, "/"), func(e string) bool {
		return e == "internal" || e == "testdata"
	})
}

func listPackages(dir string, solo bool, pattern string) ([]pkg, error) {
	out, err := goOutput(dir, solo, "list", "-e", "-f", "{{.ImportPath}}\t{{.Name}}\t{{.Dir}}\t{{join .GoFiles \" \"}}{{if .Error}}\t{{.Error}}{{end}}", pattern)
	if err != nil {
		return nil, err
	}
	var pkgs []pkg
	for line := range strings.Lines(out) {
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) < 4 {
			return nil, fmt.Errorf("go list printed %q", line)
		}
		if len(f) > 4 {
			return nil, fmt.Errorf("go list: %s: %s", f[0], f[4])
		}
		pkgs = append(pkgs, pkg{importPath: f[0], name: f[1], dir: f[2], files: strings.Fields(f[3])})
	}
	return pkgs, nil
}

func goOutput(dir string, solo bool, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	if solo {
		cmd.Env = append(cmd.Env, "GOWORK=off")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go %s (in %q): %v\n%s", strings.Join(args, " "), dir, err, stderr.Bytes())
	}
	return string(out), nil
}

// entry is one declaration of the listing, with the name it sorts by.
type entry struct {
	name string
	node ast.Node
}

// listing returns p's exported declarations, or nil if it has none.
func listing(p pkg) ([]byte, error) {
	fset := token.NewFileSet()
	var consts, vars, funcs, types []entry
	methods := map[string][]entry{} // by receiver type name
	for _, name := range p.files {
		f, err := parser.ParseFile(fset, filepath.Join(p.dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				fn := *d
				fn.Doc, fn.Body = nil, nil
				if d.Recv == nil {
					funcs = append(funcs, entry{d.Name.Name, &fn})
					continue
				}
				if recv := receiverType(d.Recv.List[0].Type); ast.IsExported(recv) {
					methods[recv] = append(methods[recv], entry{d.Name.Name, &fn})
				}
			case *ast.GenDecl:
				switch d.Tok {
				case token.CONST, token.VAR:
					if e, ok := values(d); ok {
						if d.Tok == token.CONST {
							consts = append(consts, e)
						} else {
							vars = append(vars, e)
						}
					}
				case token.TYPE:
					for _, s := range d.Specs {
						ts := s.(*ast.TypeSpec)
						if !ts.Name.IsExported() {
							continue
						}
						spec := *ts
						spec.Doc, spec.Comment = nil, nil
						spec.Type = filterType(spec.Type)
						types = append(types, entry{ts.Name.Name, &ast.GenDecl{Tok: token.TYPE, Specs: []ast.Spec{&spec}}})
					}
				}
			}
		}
	}
	if len(consts)+len(vars)+len(funcs)+len(types) == 0 {
		return nil, nil
	}
	byName := func(a, b entry) int { return cmp.Compare(a.name, b.name) }
	for _, group := range [][]entry{consts, vars, funcs, types} {
		slices.SortStableFunc(group, byName)
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "// Code generated by make api; DO NOT EDIT.\n\npackage %s // import %q\n", p.name, p.importPath)
	cfg := printer.Config{Mode: printer.UseSpaces | printer.TabIndent, Tabwidth: 8}
	// Each declaration is printed without the blank lines that removed
	// fields and comments leave, then formatted again (gofmt aligns what
	// is now contiguous), so that the listing depends on the declarations
	// alone.
	emit := func(n ast.Node) error {
		var decl bytes.Buffer
		decl.WriteString("package p\n")
		if err := cfg.Fprint(&decl, fset, n); err != nil {
			return err
		}
		var dense strings.Builder
		for line := range strings.Lines(decl.String()) {
			if strings.TrimSpace(line) != "" {
				dense.WriteString(line)
			}
		}
		dense.WriteString("\n")
		src, err := format.Source([]byte(dense.String()))
		if err != nil {
			return fmt.Errorf("format %q: %w", dense.String(), err)
		}
		buf.Write(bytes.TrimPrefix(src, []byte("package p\n"))) // keeps the blank line before the declaration
		return nil
	}
	for _, group := range [][]entry{consts, vars, funcs} {
		for _, e := range group {
			if err := emit(e.node); err != nil {
				return nil, err
			}
		}
	}
	for _, t := range types {
		if err := emit(t.node); err != nil {
			return nil, err
		}
		ms := methods[t.name]
		slices.SortStableFunc(ms, byName)
		for _, m := range ms {
			if err := emit(m.node); err != nil {
				return nil, err
			}
		}
	}
	return buf.Bytes(), nil
}

// values returns the exported specs of a const or var declaration as one
// declaration, named after its first exported name.
func values(d *ast.GenDecl) (entry, bool) {
	out := &ast.GenDecl{Tok: d.Tok, Lparen: d.Lparen, Rparen: d.Rparen}
	name := ""
	for _, s := range d.Specs {
		vs := s.(*ast.ValueSpec)
		if !slices.ContainsFunc(vs.Names, (*ast.Ident).IsExported) {
			continue
		}
		spec := *vs
		spec.Doc, spec.Comment = nil, nil
		out.Specs = append(out.Specs, &spec)
		if name == "" {
			name = vs.Names[slices.IndexFunc(vs.Names, (*ast.Ident).IsExported)].Name
		}
	}
	if len(out.Specs) == 0 {
		return entry{}, false
	}
	if len(out.Specs) == 1 {
		out.Lparen, out.Rparen = token.NoPos, token.NoPos
	}
	return entry{name, out}, true
}

// receiverType returns the name of a method receiver's base type.
func receiverType(x ast.Expr) string {
	for {
		switch t := x.(type) {
		case *ast.StarExpr:
			x = t.X
		case *ast.IndexExpr:
			x = t.X
		case *ast.IndexListExpr:
			x = t.X
		case *ast.ParenExpr:
			x = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// filterType returns x with the unexported fields of its structs and the
// unexported methods of its interfaces left out (marked incomplete, which
// the printer shows as a comment), at every depth.
func filterType(x ast.Expr) ast.Expr {
	switch t := x.(type) {
	case *ast.StructType:
		out := *t
		out.Fields = filterFields(t.Fields, &out.Incomplete)
		return &out
	case *ast.InterfaceType:
		out := *t
		out.Methods = filterFields(t.Methods, &out.Incomplete)
		return &out
	case *ast.StarExpr:
		out := *t
		out.X = filterType(t.X)
		return &out
	case *ast.ArrayType:
		out := *t
		out.Elt = filterType(t.Elt)
		return &out
	case *ast.MapType:
		out := *t
		out.Key, out.Value = filterType(t.Key), filterType(t.Value)
		return &out
	}
	return x
}

func filterFields(list *ast.FieldList, incomplete *bool) *ast.FieldList {
	if list == nil {
		return nil
	}
	out := *list
	out.List = nil
	for _, f := range list.List {
		field := *f
		field.Doc, field.Comment = nil, nil
		if len(f.Names) == 0 {
			// Embedded: exported when its type name is (or a type
			// constraint term of an interface, kept as is).
			if name := embeddedName(f.Type); name != "" && !ast.IsExported(name) {
				*incomplete = true
				continue
			}
		} else {
			field.Names = slices.DeleteFunc(slices.Clone(f.Names), func(n *ast.Ident) bool { return !n.IsExported() })
			if len(field.Names) < len(f.Names) {
				*incomplete = true
			}
			if len(field.Names) == 0 {
				continue
			}
		}
		field.Type = filterType(f.Type)
		out.List = append(out.List, &field)
	}
	return &out
}

// embeddedName returns the type name of an embedded field, "" for what is
// not a plain (possibly qualified or pointer) type name.
func embeddedName(x ast.Expr) string {
	switch t := x.(type) {
	case *ast.StarExpr:
		return embeddedName(t.X)
	case *ast.SelectorExpr:
		return t.Sel.Name
	case *ast.Ident:
		return t.Name
	case *ast.IndexExpr:
		return embeddedName(t.X)
	case *ast.IndexListExpr:
		return embeddedName(t.X)
	}
	return ""
}
