package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// api is what the module's public packages declare: per package name, its
// exported names ("Name", "Type.Method", "Type.Field").
type api map[string]map[string]bool

// publicAPI parses every public package's non-test files.
func publicAPI(t *testing.T) (api, map[string]string) {
	names := api{}
	dirs := map[string]string{} // package name -> directory
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "internal" || d.Name() == "examples" || d.Name() == "bench" || d.Name() == "cmd") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := f.Name.Name
		dirs[pkg] = filepath.Dir(path)
		set := names[pkg]
		if set == nil {
			set = map[string]bool{}
			names[pkg] = set
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv == nil {
					set[d.Name.Name] = true
					continue
				}
				set[recvName(d.Recv.List[0].Type)+"."+d.Name.Name] = true
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						set[s.Name.Name] = true
						addMembers(set, s.Name.Name, s.Type)
					case *ast.ValueSpec:
						for _, n := range s.Names {
							set[n.Name] = true
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names, dirs
}

func recvName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.StarExpr:
		return recvName(e.X)
	case *ast.IndexExpr:
		return recvName(e.X)
	case *ast.Ident:
		return e.Name
	}
	return ""
}

// addMembers records a struct's fields and an interface's methods.
func addMembers(set map[string]bool, typ string, e ast.Expr) {
	var fields *ast.FieldList
	switch e := e.(type) {
	case *ast.StructType:
		fields = e.Fields
	case *ast.InterfaceType:
		fields = e.Methods
	default:
		return
	}
	for _, f := range fields.List {
		for _, n := range f.Names {
			set[typ+"."+n.Name] = true
		}
		if len(f.Names) == 0 { // embedded: its name is a field
			set[typ+"."+recvName(f.Type)] = true
		}
	}
}

// has reports whether pkg declares name, or name is a member of a type
// pkg declares.
func (a api) has(pkg, name string) bool { return a[pkg][name] }

// anyHas reports whether some public package declares Type.Member.
func (a api) anyHas(name string) bool {
	for _, set := range a {
		if set[name] {
			return true
		}
	}
	return false
}

// docTexts returns the README and every doc comment of the public
// packages (package docs and declarations'), by where they are.
func docTexts(t *testing.T) map[string]string {
	texts := map[string]string{}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	texts["README.md"] = string(b)
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "internal" || d.Name() == "examples" || d.Name() == "bench") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		var sb strings.Builder
		for _, cg := range f.Comments {
			sb.WriteString(cg.Text())
		}
		texts[path] = sb.String()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return texts
}

// qualified matches a reference to a name of one of the module's public
// packages: verbs.QPCap, rdmacm.ConnParam.ResponderResources, *rpma.Error.
var qualified = regexp.MustCompile(`\b(verbs|driver|rdmacm|rpma|rsocket|faults|capture|loop|iwarp|shm|roce|rdmacore)\.([A-Z]\w*)(?:\.([A-Z]\w*))?`)

// Every name of a goverbs package that the README or a doc comment gives
// (verbs.QPCap, rdmacm.ConnParam.ResponderResources) exists: a rename
// that leaves a doc behind fails here.
func TestDocumentedNamesExist(t *testing.T) {
	a, _ := publicAPI(t)
	if len(a["verbs"]) < 100 || len(a["rdmacm"]) < 20 {
		t.Fatalf("found %d names in verbs, %d in rdmacm: is root right?", len(a["verbs"]), len(a["rdmacm"]))
	}
	checked := 0
	for where, text := range docTexts(t) {
		for _, m := range qualified.FindAllStringSubmatch(text, -1) {
			pkg, name, member := m[1], m[2], m[3]
			if _, ok := a[pkg]; !ok {
				continue // rdmacore without its tag, or a name of another module
			}
			checked++
			if !a.has(pkg, name) {
				t.Errorf("%s: %s.%s does not exist", where, pkg, name)
				continue
			}
			if member != "" && !a.has(pkg, name+"."+member) && a.has(pkg, name) && isType(a, pkg, name) {
				t.Errorf("%s: %s.%s.%s does not exist", where, pkg, name, member)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d references: is the pattern right?", checked)
	}
}

// isType reports whether pkg.name has members recorded (a type with
// fields or methods), so that a member reference can be checked.
func isType(a api, pkg, name string) bool {
	for k := range a[pkg] {
		if strings.HasPrefix(k, name+".") {
			return true
		}
	}
	return false
}

// backticked matches a `Type.Member` in the README (an unqualified method
// or field the text names, such as `CQ.WaitSpin`).
var backticked = regexp.MustCompile("`\\*?([A-Z]\\w*)\\.([A-Z]\\w*)`")

// Every `Type.Member` the README names is a method or field of a type of
// a public package.
func TestREADMEMembersExist(t *testing.T) {
	a, _ := publicAPI(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, m := range backticked.FindAllStringSubmatch(string(b), -1) {
		checked++
		if !a.anyHas(m[1] + "." + m[2]) {
			t.Errorf("README.md: %s.%s is no method or field of a goverbs type", m[1], m[2])
		}
	}
	if checked == 0 {
		t.Fatal("no `Type.Member` in the README: is the pattern right?")
	}
}

// goDoc matches the README's `go doc ./path [Symbol]`.
var goDoc = regexp.MustCompile(`go doc(?: -all)?\s+\./([\w/]+)(?:\s+([A-Z][\w.]*))?`)

// Every `go doc ./path Symbol` of the README names a package that exists
// and a symbol it declares.
func TestREADMEGoDocTargetsExist(t *testing.T) {
	a, dirs := publicAPI(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Join(strings.Fields(string(b)), " ") // a `go doc` may wrap
	checked := 0
	for _, m := range goDoc.FindAllStringSubmatch(text, -1) {
		checked++
		dir := filepath.Join(root, m[1])
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			t.Errorf("README.md: go doc ./%s: no such package", m[1])
			continue
		}
		if m[2] == "" {
			continue
		}
		pkg := ""
		for p, d := range dirs {
			if filepath.Clean(d) == filepath.Clean(dir) {
				pkg = p
			}
		}
		if !a.has(pkg, m[2]) {
			t.Errorf("README.md: go doc ./%s %s: no such symbol", m[1], m[2])
		}
	}
	if checked < 5 {
		t.Fatalf("found %d `go doc` in the README", checked)
	}
}

// exampleName matches an Example function's name in the README.
var exampleName = regexp.MustCompile("`(Example\\w*)`")

// Every Example function the README names exists, in the file the README
// gives or in some package's tests.
func TestREADMEExamplesExist(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, "_test.go") {
			src, _ := os.ReadFile(path)
			all.Write(src)
		}
		return nil
	})
	for _, m := range exampleName.FindAllStringSubmatch(string(b), -1) {
		if m[1] == "Example" {
			continue
		}
		if !strings.Contains(all.String(), "func "+m[1]+"(") {
			t.Errorf("README.md: %s is no Example function", m[1])
		}
	}
}

// The README's layout lists every command of cmd/goverbs (a file there
// that is not main.go is a command).
func TestREADMEListsEveryCommand(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var layout string
	for _, para := range strings.Split(string(b), "\n- ") {
		if strings.HasPrefix(para, "`cmd/goverbs`") {
			layout = para
		}
	}
	if layout == "" {
		t.Fatal("no layout entry for cmd/goverbs in the README")
	}
	files, _ := filepath.Glob(filepath.Join(root, "cmd", "goverbs", "*.go"))
	n := 0
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".go")
		if name == "main" || strings.HasSuffix(name, "_test") {
			continue
		}
		n++
		if !strings.Contains(layout, "`"+name+"`") {
			t.Errorf("README.md's layout of cmd/goverbs does not list the command %s", name)
		}
	}
	if n < 4 {
		t.Fatalf("found %d commands in cmd/goverbs", n)
	}
}
