package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tenure-go/tenure/store"
)

// section is a part of a Markdown document under one heading, with its
// subsections.
type section struct {
	heading string
	text    string
}

// sections splits a document at its headings: each section runs to the
// next heading of the same or a higher level.
func sections(text string) []section {
	lines := strings.Split(text, "\n")
	var out []section
	inCode := false
	level := func(l string) int {
		n := len(l) - len(strings.TrimLeft(l, "#"))
		if n > 0 && n < len(l) && l[n] == ' ' {
			return n
		}
		return 0
	}
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inCode = !inCode
		}
		n := level(l)
		if inCode || n == 0 {
			continue
		}
		end := len(lines)
		code := false
		for j := i + 1; j < len(lines); j++ {
			if strings.HasPrefix(strings.TrimSpace(lines[j]), "```") {
				code = !code
			}
			if m := level(lines[j]); !code && m > 0 && m <= n {
				end = j
				break
			}
		}
		out = append(out, section{heading: l, text: strings.Join(lines[i:end], "\n")})
	}
	return out
}

// sectionOf returns the text of the first section whose heading contains
// want.
func sectionOf(t *testing.T, secs []section, want string) string {
	t.Helper()
	for _, s := range secs {
		if strings.Contains(s.heading, want) {
			return s.text
		}
	}
	t.Errorf("docs/configuration.md has no section whose heading names %s", want)
	return ""
}

// parseDir parses the non-test Go files of a directory of the repository.
func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var out []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, af)
	}
	return out
}

// structFields returns the exported fields of the struct type name.
func structFields(files []*ast.File, name string) []string {
	var out []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || ts.Name.Name != name {
				return true
			}
			if st, ok := ts.Type.(*ast.StructType); ok {
				for _, fl := range st.Fields.List {
					for _, id := range fl.Names {
						if id.IsExported() {
							out = append(out, id.Name)
						}
					}
				}
			}
			return false
		})
	}
	return out
}

// mentions reports whether text names name in a code span (`name`,
// `name(...)`, `name.X`, `--name`).
func mentions(text, name string) bool {
	re := regexp.MustCompile(`(^|[^\w-])` + regexp.QuoteMeta(name) + `([^\w-]|$)`)
	for _, span := range codeSpanRE.FindAllString(text, -1) {
		if re.MatchString(strings.Trim(span, "`")) {
			return true
		}
	}
	return false
}

// envNames returns the environment variables that the non-test Go code of
// dir reads with os.Getenv or os.LookupEnv (string literals, or constants
// of the package).
func envNames(t *testing.T, dir string) []string {
	t.Helper()
	files := parseDir(t, dir)
	consts := map[string]string{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if vs, ok := n.(*ast.ValueSpec); ok {
				for i, id := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[id.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
			return true
		})
	}
	var out []string
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 1 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Getenv" && sel.Sel.Name != "LookupEnv") {
				return true
			}
			switch arg := call.Args[0].(type) {
			case *ast.BasicLit:
				s, _ := strconv.Unquote(arg.Value)
				out = append(out, s)
			case *ast.Ident:
				if v, ok := consts[arg.Name]; ok {
					out = append(out, v)
				}
			}
			return true
		})
	}
	return out
}

// dedupe returns names without repetitions, in their first order.
func dedupe(names []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func readDoc(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// storeDir maps a registered scheme to its package's directory.
func storeDir(scheme string) string { return "store/" + scheme }

// docs/configuration.md names every option of the Locker and of election,
// every URL parameter and Go configuration field of every registered
// store, every environment variable that tenure reads or sets, and every
// flag of every command; docs/testing.md every variable of the test suite.
func TestConfigurationReference(t *testing.T) {
	ref := readDoc(t, "docs/configuration.md")
	secs := sections(ref)

	// The Locker's options and the acquire options.
	locker := sectionOf(t, secs, "## The Locker")
	for _, f := range parseDir(t, ".") {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !fn.Name.IsExported() || fn.Type.Results == nil || len(fn.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fn.Type.Results.List[0].Type.(*ast.Ident); ok && (id.Name == "Option" || id.Name == "AcquireOption") && !mentions(locker, fn.Name.Name) {
				t.Errorf("docs/configuration.md, The Locker: the option %s is missing", fn.Name.Name)
			}
		}
	}

	// Election.
	el := sectionOf(t, secs, "## Election")
	efiles := parseDir(t, "election")
	for _, typ := range []string{"Config", "ObserverConfig", "ParticipantOptions"} {
		fields := structFields(efiles, typ)
		if len(fields) == 0 {
			t.Errorf("election.%s has no fields", typ)
		}
		for _, f := range fields {
			if !mentions(el, f) {
				t.Errorf("docs/configuration.md, Election: election.%s.%s is missing", typ, f)
			}
		}
	}

	// Every store: a section, its URL parameters, its Config's fields.
	params := acceptedParams(t)
	for _, s := range store.Schemes() {
		sec := sectionOf(t, secs, "(`"+storeDir(s.Name)+"`)")
		for _, p := range params[s.Name] {
			if !mentions(sec, p) {
				t.Errorf("docs/configuration.md, %s: the URL parameter %s is missing", s.Name, p)
			}
		}
		for _, f := range structFields(parseDir(t, storeDir(s.Name)), "Config") {
			if !mentions(sec, f) {
				t.Errorf("docs/configuration.md, %s: the field %s.Config.%s is missing", s.Name, s.Name, f)
			}
		}
	}

	// The Kubernetes store, a module of its own that the root module does
	// not import (it requires client-go) and store.Schemes so does not
	// list: its URL parameters and Config fields, read from its sources.
	k8s := sectionOf(t, secs, "(`store/kubernetes`)")
	for _, p := range kubernetesParams(t) {
		if !mentions(k8s, p) {
			t.Errorf("docs/configuration.md, kubernetes: the URL parameter %s is missing", p)
		}
	}
	for _, f := range structFields(parseDir(t, "store/kubernetes"), "Config") {
		if !mentions(k8s, f) {
			t.Errorf("docs/configuration.md, kubernetes: the field kubernetes.Config.%s is missing", f)
		}
	}

	// Environment: what the command reads and sets.
	env := sectionOf(t, secs, "## Environment variables")
	testingDoc := readDoc(t, "docs/testing.md")
	for _, name := range dedupe(envNames(t, "cmd/tenure")) {
		if !mentions(env, name) && !mentions(testingDoc, name) {
			t.Errorf("the environment variable %s, read by cmd/tenure, is in neither docs/configuration.md nor docs/testing.md", name)
		}
	}
	for _, f := range parseDir(t, "cmd/tenure") {
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if m := regexp.MustCompile(`^"(TENURE_[A-Z_]+)=`).FindStringSubmatch(lit.Value); m != nil && !mentions(env, m[1]) {
					t.Errorf("docs/configuration.md, Environment variables: %s, which tenure sets for the command, is missing", m[1])
				}
			}
			return true
		})
	}
	// The test suite's servers (testserver.Env calls in tests) and switches.
	testEnv := regexp.MustCompile(`testserver\.Env\([^,]+,\s*"(TENURE_[A-Z_]+)"`)
	names := envNames(t, "internal/testserver")
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "tools") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range testEnv.FindAllStringSubmatch(string(b), -1) {
				names = append(names, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range dedupe(names) {
		if !mentions(testingDoc, name) {
			t.Errorf("docs/testing.md: the test suite's variable %s is missing", name)
		}
	}

	// Every flag of every command, from the generated reference (which
	// TestCLIReference keeps in step with the commands).
	cli := sectionOf(t, secs, "## The command line")
	pages, err := filepath.Glob(filepath.Join(root, "docs", "cli", "*.md"))
	if err != nil || len(pages) == 0 {
		t.Fatalf("no pages in docs/cli: %v", err)
	}
	flagRE := regexp.MustCompile(`(?m)^\s+(?:-\w, )?(--[a-z][a-z-]*)`)
	// rows returns the table rows of the section whose first cell names the
	// command (or "every command").
	rows := func(cmd string) string {
		var out []string
		for _, line := range strings.Split(cli, "\n") {
			cells := strings.Split(line, "|")
			if len(cells) > 2 && (strings.Contains(cells[1], "every command") || mentions(cells[1], cmd)) {
				out = append(out, line)
			}
		}
		return strings.Join(out, "\n")
	}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		cmd := strings.TrimPrefix(strings.TrimSuffix(filepath.Base(p), ".md"), "tenure_")
		_, opts, ok := strings.Cut(string(b), "### Options")
		if !ok {
			continue
		}
		for _, m := range flagRE.FindAllStringSubmatch(opts, -1) {
			if !mentions(rows(cmd), m[1]) {
				t.Errorf("docs/configuration.md, The command line: %s of %s is missing", m[1], strings.ReplaceAll(cmd, "_", " "))
			}
		}
	}
}

// kubernetesParams returns the URL parameters of the Kubernetes store: the
// string cases of the switch on the parameter's name in its ParseURL
// (store/kubernetes/url.go). The store is a module of its own, which this
// module must not import, so its parser cannot be probed as the others'
// are.
func kubernetesParams(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, f := range parseDir(t, "store/kubernetes") {
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Name.Name != "ParseURL" {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sw, ok := n.(*ast.SwitchStmt)
				if !ok {
					return true
				}
				if _, ok := sw.Tag.(*ast.Ident); !ok {
					return true
				}
				for _, st := range sw.Body.List {
					for _, e := range st.(*ast.CaseClause).List {
						if lit, ok := e.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							s, _ := strconv.Unquote(lit.Value)
							out = append(out, s)
						}
					}
				}
				return true
			})
		}
	}
	if len(out) == 0 {
		t.Fatal("store/kubernetes: no URL parameters found in the switch of its ParseURL; has the parser changed?")
	}
	sort.Strings(out)
	return out
}
