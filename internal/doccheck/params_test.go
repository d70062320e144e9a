package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/tenure-go/tenure/store"
	_ "github.com/tenure-go/tenure/store/all"
)

// baseURLs are valid URLs of each scheme (and its aliases), to which the
// parameter probe adds one parameter at a time.
var baseURLs = map[string][]string{
	"sqlite":   {"sqlite:/nonexistent/leases.db"},
	"postgres": {"postgres://u@db.invalid/app"},
	"etcd":     {"etcd://etcd.invalid:2379"},
	"redis": {"redis://redis.invalid:6379/0", "rediss://redis.invalid:6379/0",
		"redis+sentinel://sentinel.invalid:26379/mymaster", "redis+cluster://node.invalid:6379"},
	"mysql":     {"mysql://u@db.invalid/app"},
	"cassandra": {"cassandra://cassandra.invalid/ks"},
	"memory":    {"memory:"},
}

// unknownParam matches what every store's URL parser says of a parameter
// it does not take.
var unknownParam = regexp.MustCompile(`unknown (URL )?(parameter|option)|unexpected option|the only one is|want memory:`)

// driverSources are the files of the drivers whose URL parameters a store
// takes as they are (pgx's, go-redis's and go-sql-driver's), relative to
// their modules.
var driverSources = map[string][]struct{ module, file string }{
	"postgres": {{"github.com/jackc/pgx/v5", "pgconn/config.go"}, {"github.com/jackc/pgx/v5", "pgxpool/pool.go"}, {"github.com/jackc/pgx/v5", "conn.go"}},
	"redis": {{"github.com/redis/go-redis/v9", "options.go"}, {"github.com/redis/go-redis/v9", "sentinel.go"},
		{"github.com/redis/go-redis/v9", "osscluster.go"}},
	"mysql": {{"github.com/go-sql-driver/mysql", "dsn.go"}},
}

// stringLiterals returns the identifier-like string literals of a Go file
// (snake_case, and camelCase as go-sql-driver names its parameters).
func stringLiterals(t *testing.T, path string) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			if s, err := strconv.Unquote(lit.Value); err == nil && regexp.MustCompile(`^[a-z][a-zA-Z0-9_]*$`).MatchString(s) {
				out = append(out, s)
			}
		}
		return true
	})
	return out
}

// acceptedParams returns, for every registered scheme, the URL parameters
// its store takes: every identifier-like string of the store's package and
// of the driver it hands parameters to, tried one at a time as a
// parameter, that the store does not refuse as unknown.
func acceptedParams(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, s := range store.Schemes() {
		bases, ok := baseURLs[s.Name]
		if !ok {
			t.Errorf("scheme %s: no base URL to probe its parameters with (add one to baseURLs)", s.Name)
			continue
		}
		candidates := map[string]bool{}
		dir := filepath.Join(root, "store", s.Name)
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				for _, c := range stringLiterals(t, f) {
					candidates[c] = true
				}
			}
		}
		for _, src := range driverSources[s.Name] {
			out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", src.module).Output()
			if err != nil {
				t.Fatalf("go list -m %s: %v", src.module, err)
			}
			for _, c := range stringLiterals(t, filepath.Join(strings.TrimSpace(string(out)), src.file)) {
				candidates[c] = true
			}
		}
		for c := range candidates {
			for _, base := range bases {
				_, err := store.Parse(base + "?" + c + "=x")
				if err == nil || !unknownParam.MatchString(err.Error()) {
					out[s.Name] = append(out[s.Name], c)
					break
				}
			}
		}
		sort.Strings(out[s.Name])
	}
	return out
}
