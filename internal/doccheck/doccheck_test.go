package doccheck

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/tenure-go/tenure"
)

// root is the repository's top directory, relative to this package.
const root = "../.."

// doc is a Markdown document of the repository.
type doc struct {
	path  string // relative to root, with slashes
	lines []string
}

// documents returns README.md, CHANGELOG.md and every Markdown file under
// docs/.
func documents(t *testing.T) []doc {
	t.Helper()
	paths := []string{"README.md", "CHANGELOG.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var docs []doc
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, doc{path: p, lines: strings.Split(string(b), "\n")})
	}
	return docs
}

// ---- Links ----

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile("^#{1,6} +(.*?) *#*$")
)

// slug is the anchor GitHub gives a heading: lower case, without
// punctuation other than '-' and '_', spaces turned into '-'.
func slug(heading string) string {
	heading = strings.ReplaceAll(heading, "`", "")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a Markdown file's headings (outside code
// blocks), with GitHub's -1, -2 for repeated ones.
func anchors(lines []string) map[string]bool {
	seen := map[string]int{}
	out := map[string]bool{}
	inCode := false
	for _, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
			continue
		}
		if inCode {
			continue
		}
		if m := headingRE.FindStringSubmatch(line); m != nil {
			s := slug(m[1])
			if n := seen[s]; n > 0 {
				out[s+"-"+strconv.Itoa(n)] = true
			} else {
				out[s] = true
			}
			seen[s]++
		}
	}
	return out
}

// Every relative link of every document names a file or directory of the
// repository (not outside it), and an anchor names a heading there.
func TestLinks(t *testing.T) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range documents(t) {
		inCode := false
		for i, line := range d.lines {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
			}
			if inCode {
				continue
			}
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				p := filepath.Join(filepath.Dir(filepath.Join(absRoot, d.path)), file)
				if file == "" {
					p = filepath.Join(absRoot, d.path)
				}
				if rel, err := filepath.Rel(absRoot, p); err != nil || strings.HasPrefix(rel, "..") {
					t.Errorf("%s:%d: link %q leaves the repository", d.path, i+1, target)
					continue
				}
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s:%d: link %q: no such file", d.path, i+1, target)
					continue
				}
				if anchor != "" && strings.HasSuffix(p, ".md") {
					b, err := os.ReadFile(p)
					if err != nil {
						t.Fatal(err)
					}
					if !anchors(strings.Split(string(b), "\n"))[anchor] {
						t.Errorf("%s:%d: link %q: no heading #%s in %s", d.path, i+1, target, anchor, file)
					}
				}
			}
		}
	}
}

var pathRE = regexp.MustCompile(`^(\.\.?/)*[\w.-]+(/[\w.-]+)+/?$`)

// Every file a document names in a code span as a path of the
// repository (docs/stores.md, store/postgres/gate.go, ../cases.md) exists,
// inside the repository.
func TestPathsInCodeSpans(t *testing.T) {
	absRoot, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{".": true, "..": true}
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		top[e.Name()] = true
	}
	for _, d := range documents(t) {
		for i, line := range d.lines {
			for _, span := range codeSpanRE.FindAllString(line, -1) {
				p := strings.Trim(span, "`")
				if !pathRE.MatchString(p) {
					continue
				}
				first, _, _ := strings.Cut(p, "/")
				if !top[first] || regexp.MustCompile(`(^|/)[A-Z][A-Z_]+(/|$)`).MatchString(p) {
					continue // not a path of the repository, or a placeholder (scripts/NAME)
				}
				found := false
				for _, base := range []string{filepath.Dir(filepath.Join(absRoot, d.path)), absRoot} {
					full := filepath.Join(base, p)
					rel, err := filepath.Rel(absRoot, full)
					if err != nil || strings.HasPrefix(rel, "..") {
						continue
					}
					if _, err := os.Stat(full); err == nil {
						found = true
					}
				}
				if !found {
					t.Errorf("%s:%d: %s: no such file in the repository", d.path, i+1, span)
				}
			}
		}
	}
}

// ---- Diary ----

// diary matches what a run log says and a manual does not: which stop,
// session or review found or measured something, dates and times of runs,
// the machine's load, commits and branches, issue numbers.
var diary = []*regexp.Regexp{
	regexp.MustCompile(`(?i)\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|\d+(st|nd|rd|th))\s+(stop|session|review|run of the day)\b`),
	regexp.MustCompile(`(?i)\b(this|that|last|next|previous|earlier|later|each|every)\s+stop\b`),
	regexp.MustCompile(`(?i)\bstop'?s\s+(review|runs?|figures|changes|code)\b`),
	regexp.MustCompile(`(?i)\b(stop|session|review)\s+\d+\b`),
	regexp.MustCompile(`(?i)\b(adversarial|new-user|code)\s+(review|trial)`),
	regexp.MustCompile(`(?i)\breview(er)?s?\s+(found|showed|could)\b`),
	regexp.MustCompile(`(?i)\bfound\s+(by|in)\s+(the|an|a|this)?\s*(review|stop|session|soak|ci|harness)`),
	regexp.MustCompile(`(?i)\bissue\s+#?\d+`),
	regexp.MustCompile(`\b20\d\d-[01]\d-[0-3]\d\b`),
	regexp.MustCompile(`\b[0-2]\d:[0-5]\d(\s*[–-]\s*[0-2]\d:[0-5]\d)?\s+UTC\b`),
	regexp.MustCompile(`(?i)\b(January|February|March|April|May|June|July|August|September|October|November|December)\s+20\d\d\b`),
	regexp.MustCompile(`(?i)\bload average`),
	regexp.MustCompile(`(?i)\bearlier runs?\b`),
	regexp.MustCompile(`(?i)\bon this branch\b`),
	regexp.MustCompile(`(?i)\b(main|branch|commit|merge)\s+(at\s+)?[0-9a-f]{7,40}\b`),
	regexp.MustCompile(`(?i)\bbefore (this|the) (change|fix|stop)\b`),
	regexp.MustCompile(`(?i)\bthe lead'?s\b`),
	regexp.MustCompile(`-s\d+[ab]?\.json\b`),
	regexp.MustCompile(`(?i)\bnot (yet )?analy[sz]ed yet\b`),
}

// No document but the CHANGELOG carries a run log's diary.
func TestNoDiary(t *testing.T) {
	for _, d := range documents(t) {
		if d.path == "CHANGELOG.md" {
			continue
		}
		for i, line := range d.lines {
			for _, re := range diary {
				if m := re.FindString(line); m != "" {
					t.Errorf("%s:%d: %q reads as a diary (history belongs in the CHANGELOG and git): %s", d.path, i+1, m, strings.TrimSpace(line))
				}
			}
		}
	}
}

// The diary patterns catch what run logs said, and leave a manual's
// sentences alone.
func TestDiaryPatterns(t *testing.T) {
	for _, s := range []string{
		"## Issue 14's targets: where they stand (ninth stop, 2026-12-04)",
		"## Ninth stop (2026-12-04, 14:20–16:30 UTC)",
		"found by the seventh stop's review",
		"| adversarial review 1 | SQLite's clock |",
		"Earlier runs on this branch ran at a load average of 20–31",
		"The first soak (commit 527ed19) had 4 overlaps",
		"JSON in benchmarks-peers-s9a.json",
		"read in Jaeger's code as of August 2026",
		"(the lead's cluster used the machine)",
		"a new-user trial found it",
	} {
		matched := false
		for _, re := range diary {
			matched = matched || re.MatchString(s)
		}
		if !matched {
			t.Errorf("not caught: %q", s)
		}
	}
	for _, s := range []string{
		"Stop the server with scripts/postgres stop before you wipe it.",
		"a stop longer than the TTL loses the lease",
		"Ctrl-Z stops the command and tenure together",
		"SIGSTOP the current holder for 1.5 to 3 TTLs",
		"etcd's concurrency.Session keeps a lease alive",
		"tokens are about 1.8·10^15 microseconds since 1970",
		"the review of a pull request",
		"The store checks the whole URL before any I/O.",
	} {
		for _, re := range diary {
			if re.MatchString(s) {
				t.Errorf("%q is caught by %s", s, re)
			}
		}
	}
}

// ---- Identifiers ----

// api is what the module's Go code declares.
type api struct {
	// pkgs maps a package name to the declarations of every directory
	// whose package has that name (store/redis is "redis").
	pkgs map[string][]*pkgDecls
	// types maps an exported type name to the packages that declare it.
	types map[string][]*pkgDecls
	// tests are the names of the Test, Benchmark and Example functions of
	// every _test.go file, and of the exported functions of storetest.
	tests map[string]bool
	// exported is every exported top-level name.
	exported map[string]bool
}

// pkgDecls are a package's exported declarations.
type pkgDecls struct {
	dir     string
	names   map[string]bool
	members map[string]map[string]bool // type -> its methods and fields
	embeds  map[string][]ast.Expr      // type -> its embedded types, or its alias target
	imports map[string]string          // file-level import names -> paths, merged
}

// modulePackages are the names under which documents refer to the
// module's packages, and to those of the modules nested in it
// (store/kubernetes, whose sources loadAPI reads like the rest: the root
// module must not import it, as it requires client-go).
var modulePackages = map[string]bool{"tenure": true, "driver": true, "election": true, "clock": true, "store": true, "storetest": true,
	"sqlite": true, "postgres": true, "etcd": true, "redis": true, "cassandra": true, "memory": true, "mysql": true, "kubernetes": true}

func loadAPI(t *testing.T) *api {
	t.Helper()
	a := &api{pkgs: map[string][]*pkgDecls{}, types: map[string][]*pkgDecls{}, tests: map[string]bool{}, exported: map[string]bool{}}
	byDir := map[string]*pkgDecls{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "docs") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		if filepath.Base(filepath.Dir(p)) == "storetest" && !strings.HasSuffix(p, "_test.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range regexp.MustCompile(`name: "(C\d\d[a-z]?_\w+)"`).FindAllStringSubmatch(string(b), -1) {
				a.tests[m[1]] = true
			}
		}
		if strings.HasSuffix(p, "_test.go") {
			for _, decl := range f.Decls {
				if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && regexp.MustCompile(`^(Test|Benchmark|Example)`).MatchString(fn.Name.Name) {
					a.tests[fn.Name.Name] = true
				}
			}
			return nil
		}
		name := f.Name.Name
		if name == "main" {
			return nil
		}
		dir := filepath.Dir(p)
		pd := byDir[dir]
		if pd == nil {
			pd = &pkgDecls{dir: dir, names: map[string]bool{}, members: map[string]map[string]bool{}, embeds: map[string][]ast.Expr{}, imports: map[string]string{}}
			byDir[dir] = pd
			a.pkgs[name] = append(a.pkgs[name], pd)
		}
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			local := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				local = imp.Name.Name
			}
			pd.imports[local] = path
		}
		member := func(typ, m string) {
			if pd.members[typ] == nil {
				pd.members[typ] = map[string]bool{}
			}
			pd.members[typ][m] = true
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if !decl.Name.IsExported() {
					continue
				}
				if decl.Recv == nil {
					pd.names[decl.Name.Name] = true
					if name == "storetest" {
						a.tests[decl.Name.Name] = true
					}
					continue
				}
				recv := decl.Recv.List[0].Type
				if s, ok := recv.(*ast.StarExpr); ok {
					recv = s.X
				}
				if ix, ok := recv.(*ast.IndexExpr); ok {
					recv = ix.X
				}
				if ix, ok := recv.(*ast.IndexListExpr); ok {
					recv = ix.X
				}
				if id, ok := recv.(*ast.Ident); ok {
					member(id.Name, decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					switch spec := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range spec.Names {
							if n.IsExported() {
								pd.names[n.Name] = true
							}
						}
					case *ast.TypeSpec:
						if !spec.Name.IsExported() {
							continue
						}
						pd.names[spec.Name.Name] = true
						if modulePackages[name] {
							a.types[spec.Name.Name] = append(a.types[spec.Name.Name], pd)
						}
						if spec.Assign.IsValid() {
							pd.embeds[spec.Name.Name] = append(pd.embeds[spec.Name.Name], spec.Type)
							continue
						}
						switch typ := spec.Type.(type) {
						case *ast.StructType:
							for _, f := range typ.Fields.List {
								if len(f.Names) == 0 {
									pd.embeds[spec.Name.Name] = append(pd.embeds[spec.Name.Name], f.Type)
									continue
								}
								for _, n := range f.Names {
									member(spec.Name.Name, n.Name)
								}
							}
						case *ast.InterfaceType:
							for _, f := range typ.Methods.List {
								for _, n := range f.Names {
									member(spec.Name.Name, n.Name)
								}
								if len(f.Names) == 0 {
									pd.embeds[spec.Name.Name] = append(pd.embeds[spec.Name.Name], f.Type)
								}
							}
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
	for _, pds := range a.pkgs {
		for _, pd := range pds {
			for n := range pd.names {
				a.exported[n] = true
			}
		}
	}
	return a
}

// known reports whether name is an exported name or a test of the module,
// or with prefix the beginning of one (TestCaseC…).
func (a *api) known(name string, prefix bool) bool {
	if a.exported[name] || a.tests[name] {
		return true
	}
	if prefix {
		for n := range a.tests {
			if strings.HasPrefix(n, name) {
				return true
			}
		}
	}
	return false
}

// hasMember reports whether type typ of pd has method or field m, also
// through embedded types and aliases.
func (a *api) hasMember(pd *pkgDecls, typ, m string, depth int) bool {
	if depth > 5 {
		return false
	}
	if pd.members[typ][m] {
		return true
	}
	for _, e := range pd.embeds[typ] {
		if s, ok := e.(*ast.StarExpr); ok {
			e = s.X
		}
		switch e := e.(type) {
		case *ast.Ident:
			if a.hasMember(pd, e.Name, m, depth+1) {
				return true
			}
		case *ast.SelectorExpr:
			if x, ok := e.X.(*ast.Ident); ok {
				path := pd.imports[x.Name]
				for _, other := range a.pkgs[path[strings.LastIndex(path, "/")+1:]] {
					if a.hasMember(other, e.Sel.Name, m, depth+1) {
						return true
					}
				}
			}
		}
	}
	return false
}

var (
	codeSpanRE  = regexp.MustCompile("`[^`\n]+`")
	qualifiedRE = regexp.MustCompile(`(?:^|[^\w./])(\(?\*?)([a-z]\w*)\.([A-Z]\w*)(?:\)?\.([A-Z]\w*))?`)
	typeMemRE   = regexp.MustCompile(`(?:^|[^\w.*])([A-Z]\w*)\.([A-Z]\w*)\b`)
	bareRE      = regexp.MustCompile("^`((?:Err|Test|Benchmark|Example|CaseC)[A-Z0-9]\\w*|C\\d\\d[a-z]?_\\w+)(…|\\*)?(?:/(C\\d\\d[a-z]?_\\w+))?[^`]*`$")
	importRE    = regexp.MustCompile(`^\s*(?:import\s+)?(\w+\s+)?"([^"]+)"`)
)

// check reports what a reference pkg.Ident[.Member] or Type.Member in
// text names that does not exist. skip lists the qualifiers that the
// text's own imports bind to other packages.
func (a *api) check(text string, skip map[string]bool) []string {
	var bad []string
	for _, m := range qualifiedRE.FindAllStringSubmatch(text, -1) {
		pkg, ident, mem := m[2], m[3], m[4]
		if !modulePackages[pkg] || skip[pkg] {
			continue
		}
		found := false
		for _, pd := range a.pkgs[pkg] {
			found = found || pd.names[ident] && (mem == "" || a.hasMember(pd, ident, mem, 0))
		}
		if !found {
			ref := pkg + "." + ident
			if mem != "" {
				ref += "." + mem
			}
			bad = append(bad, ref)
		}
	}
	for _, m := range typeMemRE.FindAllStringSubmatch(text, -1) {
		typ, mem := m[1], m[2]
		pds := a.types[typ]
		if len(pds) == 0 {
			continue // not one of the module's types: another library's, or prose
		}
		found := false
		for _, pd := range pds {
			found = found || a.hasMember(pd, typ, mem, 0)
		}
		if !found {
			bad = append(bad, typ+"."+mem)
		}
	}
	return bad
}

// Every Go identifier a document names in the module's packages exists:
// pkg.Name and pkg.Type.Member, Type.Member of the module's types, in code
// spans and code blocks; sentinel errors, test names and storetest cases
// in code spans.
func TestIdentifiers(t *testing.T) {
	a := loadAPI(t)
	if len(a.pkgs["tenure"]) == 0 || !a.tests["TestIdentifiers"] {
		t.Fatalf("the module's packages were not found from %s", root)
	}
	for _, d := range documents(t) {
		if d.path == "CHANGELOG.md" {
			continue
		}
		inCode := false
		var skip map[string]bool
		for i, line := range d.lines {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
				skip = map[string]bool{}
				if inCode {
					// A code block's imports bind names for the whole block.
					for _, l := range d.lines[i+1:] {
						if strings.HasPrefix(strings.TrimSpace(l), "```") {
							break
						}
						if m := importRE.FindStringSubmatch(l); m != nil && strings.Contains(m[2], ".") {
							local := strings.TrimSpace(m[1])
							if local == "" {
								local = m[2][strings.LastIndex(m[2], "/")+1:]
								if regexp.MustCompile(`^v\d+$`).MatchString(local) {
									p := strings.TrimSuffix(m[2], "/"+local)
									local = p[strings.LastIndex(p, "/")+1:]
									local = strings.TrimPrefix(local, "go-")
								}
							}
							if !strings.HasPrefix(m[2], "github.com/tenure-go/tenure") {
								skip[local] = true
							}
						}
					}
				}
				continue
			}
			var spans []string
			if inCode {
				spans = []string{line}
			} else {
				spans = codeSpanRE.FindAllString(line, -1)
			}
			for _, span := range spans {
				for _, ref := range a.check(strings.Trim(span, "`"), skip) {
					t.Errorf("%s:%d: %s does not exist in the module", d.path, i+1, ref)
				}
				if m := bareRE.FindStringSubmatch(span); m != nil && !inCode {
					for _, name := range []string{m[1], m[3]} {
						if name != "" && !a.known(name, m[2] != "" && name == m[1]) {
							t.Errorf("%s:%d: %s is neither an exported name nor a test of the module", d.path, i+1, name)
						}
					}
				}
			}
		}
	}
}

// The identifier check catches what the documents got wrong before.
func TestIdentifierCheckCatches(t *testing.T) {
	a := loadAPI(t)
	for _, s := range []string{"tenure.UnknownOutcome(cause)", "tenure.TTLChecker", "tenure.Locker.Reacquire", "Lease.Refresh", "(*redis.Store).RemoveOld",
		"driver.ErrBadConn", "mysql.Config.Timeout", "kubernetes.Config.Server", "kubernetes.ErrNotInPod"} {
		if len(a.check(s, nil)) == 0 {
			t.Errorf("%q is not reported", s)
		}
	}
	for _, s := range []string{"driver.UnknownOutcome(cause)", "driver.TTLChecker", "tenure.ErrLeaseLost", "Lease.Release", "tenure.SlotLease.Release",
		"(*redis.Store).RemoveOldLayout", "cassandra.Config.ClusterHook", "election.Config.OnStartedLeading", "tenure.HeldError.Holder", "Locker.Owns",
		"database/sql/driver.ErrBadConn", "mysql.Config.SweepInterval", "redis.Config.WaitReplicas",
		"kubernetes.Config.Kubeconfig", "kubernetes.ErrNotInCluster", "kubernetes.LeaseName"} {
		if bad := a.check(s, nil); len(bad) > 0 {
			t.Errorf("%q: %v reported", s, bad)
		}
	}
	if bad := a.check("redis.NewClient(&redis.Options{})", map[string]bool{"redis": true}); len(bad) > 0 {
		t.Errorf("go-redis's names reported: %v", bad)
	}
	if bad := a.check("kubernetes.NewForConfig(cfg)", map[string]bool{"kubernetes": true}); len(bad) > 0 {
		t.Errorf("client-go's names reported: %v", bad)
	}
}

// ---- Version ----

// tenure.Version is the newest release in the CHANGELOG.
func TestVersionIsInChangelog(t *testing.T) {
	f, err := os.Open(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	re := regexp.MustCompile(`^## \[(\d+\.\d+\.\d+[^\]]*)\]`)
	var releases []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			releases = append(releases, m[1])
		}
	}
	if len(releases) == 0 || releases[0] != tenure.Version {
		t.Fatalf("tenure.Version is %s; the CHANGELOG's releases, newest first: %v", tenure.Version, releases)
	}
}
