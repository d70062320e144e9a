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

// storeOnly are module path prefixes of stores that are modules of their
// own (store/kubernetes and client-go): a program that imports tenure and
// its other stores must never list them.
var storeOnly = []string{
	"k8s.io/",
	"sigs.k8s.io/",
	"github.com/tenure-go/tenure/store/kubernetes",
}

// TestLibraryModules: a fresh module that imports github.com/tenure-go/tenure,
// its store/sqlite and store/all (every store's URL scheme of this module),
// with a replace to this checkout, lists no module that only the tools
// need, and none of the Kubernetes store's. It works offline from the module cache that
// building this repository filled, and fetches what that cache lacks from
// the configured module proxy.
func TestLibraryModules(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go mod tidy in a fresh module")
	}
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
	write("main.go", `package main

import (
	"context"

	"github.com/tenure-go/tenure"
	_ "github.com/tenure-go/tenure/store/all"
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
	for _, line := range strings.Split(mods, "\n") {
		for _, p := range append(toolOnly, storeOnly...) {
			if strings.HasPrefix(line, p) {
				t.Errorf("a program that imports tenure, store/sqlite and store/all lists %s", line)
			}
		}
	}
}
