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

// root is the module's root directory.
const root = "../.."

// goCode tells a code block of Go from a table or a diagram: it assigns
// or calls a package's function.
var goCode = regexp.MustCompile(`:=|\b[a-z]\w*\.[A-Z]\w*\(`)

// packageDocs returns each package directory's package doc comment.
func packageDocs(t *testing.T) map[string]string {
	docs := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "bench") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			return err
		}
		if f.Doc != nil {
			docs[filepath.Dir(path)] += f.Doc.Text()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// codeBlocks returns the Go code blocks of a doc comment's text: runs of
// indented lines.
func codeBlocks(doc string) [][]string {
	var blocks [][]string
	var cur []string
	flush := func() {
		if len(cur) > 0 && goCode.MatchString(strings.Join(cur, "\n")) {
			blocks = append(blocks, cur)
		}
		cur = nil
	}
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "    ") {
			cur = append(cur, l)
			continue
		}
		flush()
	}
	flush()
	return blocks
}

// exampleSources returns the source of the Example functions of the
// package in dir, whitespace collapsed.
func exampleSources(t *testing.T, dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") {
				b.WriteString(squash(string(src[fset.Position(fn.Pos()).Offset:fset.Position(fn.End()).Offset])))
				b.WriteByte('\n')
			}
		}
	}
	return b.String()
}

func squash(s string) string { return strings.Join(strings.Fields(s), " ") }

// Every line of Go in a package doc is a line of one of the package's
// Example functions, which go test compiles: a doc cannot show code that
// does not build (the shm package's did).
func TestPackageDocCodeIsInExamples(t *testing.T) {
	docs := packageDocs(t)
	if len(docs) < 10 {
		t.Fatalf("found %d package docs: is root right?", len(docs))
	}
	checked := 0
	for dir, doc := range docs {
		blocks := codeBlocks(doc)
		if len(blocks) == 0 {
			continue
		}
		examples := exampleSources(t, dir)
		for _, block := range blocks {
			for _, l := range block {
				line := squash(l)
				if line == "" || line == "..." {
					continue
				}
				checked++
				if !strings.Contains(examples, line) {
					t.Errorf("%s: the package doc's code line %q is in none of the package's Example functions", dir, line)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no code found in any package doc (the shm package's has some)")
	}
}

// The README's Go is package verbs' Example_readme, which go test runs.
func TestREADMECodeIsAnExample(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	examples := exampleSources(t, filepath.Join(root, "verbs"))
	in, checked := false, 0
	for _, l := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(l, "```go"):
			in = true
			continue
		case strings.HasPrefix(l, "```"):
			in = false
		}
		line := squash(l)
		if !in || line == "" || line == "import (" || line == ")" || strings.HasPrefix(line, `"`) {
			continue
		}
		checked++
		if !strings.Contains(examples, line) {
			t.Errorf("README's code line %q is not in package verbs' examples", line)
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d lines of the README's Go", checked)
	}
}

// The README stands alone in a clone of the repository: no link or path
// leads outside it.
func TestREADMEStaysInTheRepository(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "../") {
			t.Errorf("README.md:%d leads outside the repository: %s", i+1, l)
		}
	}
}
