package modcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// toolOnly are module path prefixes that only tools/ (the benchmark and its
// chart) may need; a program that imports tenure must never list them.
var toolOnly = []string{
	"gonum.org/",
	"codeberg.org/go-fonts/",
	"codeberg.org/go-latex/",
	"codeberg.org/go-pdf/",
	"git.sr.ht/~sbinet/",
	"github.com/ajstarks/svgo",
	"github.com/golang/freetype",
	"golang.org/x/image",
	"github.com/tenure-go/tenure/tools",
}

// TestLibraryModules: a fresh module that imports github.com/tenure-go/tenure
// and its store/sqlite (with a replace to this checkout) lists no module
// that only the tools need. It works offline from the module cache that
// building this repository filled, and fetches what that cache lacks from
// the configured module proxy.
func TestLibraryModules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy in a fresh module")
	}
	mods := freshModules(t, `package main

import (
	"context"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/sqlite"
)

func main() {
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: "leases.db"})
	if err != nil {
		panic(err)
	}
	l, err := tenure.New(s)
	if err != nil {
		panic(err)
	}
	_ = l
}
`)
	for _, line := range strings.Split(mods, "\n") {
		for _, p := range toolOnly {
			if strings.HasPrefix(line, p) {
				t.Errorf("a program that imports tenure and store/sqlite lists %s", line)
			}
		}
	}
}

// storeOnly are module path prefixes of the Kubernetes store, a module of
// its own (store/kubernetes, and client-go with the k8s.io modules it
// needs): a program that imports tenure and every store of its module must
// never list them. (sigs.k8s.io/yaml is not among them: the library's own
// dependencies list it.)
var storeOnly = []string{
	"k8s.io/",
	"sigs.k8s.io/structured-merge-diff",
	"github.com/tenure-go/tenure/store/kubernetes",
}

// TestNoKubernetesModules: a fresh module that imports the root package and
// store/all (the registry of every store's URL scheme in this module) lists
// none of the Kubernetes store's modules: the store is a module of its own,
// and the registry gains its scheme only in programs that import it.
func TestNoKubernetesModules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy in a fresh module")
	}
	mods := freshModules(t, `package main

import (
	"context"

	"github.com/tenure-go/tenure/store"
	_ "github.com/tenure-go/tenure/store/all"
)

func main() {
	s, err := store.Open(context.Background(), "sqlite:leases.db")
	if err != nil {
		panic(err)
	}
	s.Close()
}
`)
	for _, line := range strings.Split(mods, "\n") {
		for _, p := range storeOnly {
			if strings.HasPrefix(line, p) {
				t.Errorf("a program that imports tenure and store/all lists %s", line)
			}
		}
	}
}

// freshModules builds a fresh module whose main.go is mainGo, requiring
// this checkout of tenure, and returns its go list -m all.
func freshModules(t *testing.T, mainGo string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	repo, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/uses-tenure\n\ngo 1.26\n\nrequire github.com/tenure-go/tenure v0.0.0\n\nreplace github.com/tenure-go/tenure => "+repo+"\n")
	write("main.go", mainGo)
	// Offline first, from the module cache that building this repository
	// filled; a cache that lacks a go.mod the fresh module's graph names
	// (a fresh machine: go build fetches only what it compiles) is filled
	// from the configured proxy, once.
	proxy := "off"
	goCmd := func(args ...string) string {
		t.Helper()
		for {
			cmd := exec.Command("go", args...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOSUMDB=off")
			if proxy != "" {
				cmd.Env = append(cmd.Env, "GOPROXY="+proxy)
			}
			out, err := cmd.CombinedOutput()
			if err != nil && proxy == "off" && strings.Contains(string(out), "module lookup disabled by GOPROXY=off") {
				t.Logf("go %s: the module cache lacks a module, fetching it from the proxy:\n%s", strings.Join(args, " "), out)
				proxy = ""
				continue
			}
			if err != nil {
				t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			return string(out)
		}
	}
	goCmd("mod", "tidy")
	goCmd("build", "./...")
	mods := goCmd("list", "-m", "all")
	t.Logf("go list -m all:\n%s", mods)
	return mods
}

// TestStoresBelowRoot: no store package depends on the root package
// tenure, directly or through another package: a store sits below the
// Locker that uses it (driver is the contract between them).
// store/storetest, which checks stores through Lockers, may.
func TestStoresBelowRoot(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./store/...")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const root = "github.com/tenure-go/tenure"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], root+"/store/storetest") {
			continue
		}
		for _, dep := range fields[1:] {
			if dep == root {
				t.Errorf("%s depends on %s", fields[0], root)
			}
		}
	}
}
