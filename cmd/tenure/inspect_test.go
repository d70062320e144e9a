//go:build linux

package main

// Inspection never changes anything (field case C20): status, list and
// release create no store, file, directory, table or keyspace; where there
// is no store they answer as of an empty one; a read-only store is read;
// what is not a tenure store gets a sentence, never a driver's message.

import (
	"crypto/sha256"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "modernc.org/sqlite"
)

// inspections are the commands that only look (release --force of a free
// resource changes nothing either), and how each answers where there is no
// store yet: as of an empty store, nothing held, and release says why
// nothing was released.
var inspections = []struct {
	args           []string
	code           int
	stdout, stderr string
}{
	{[]string{"status", "job"}, exitFree, `"job" is free`, ""},
	{[]string{"status", "--json", "job"}, exitFree, `"held": false`, ""},
	{[]string{"list"}, exitOK, "RESOURCE", ""},
	{[]string{"list", "--json"}, exitOK, "[]", ""},
	{[]string{"release", "--force", "job"}, exitFree, "", `release: "job" is not held: there is no tenure store at sqlite:`},
	{[]string{"release", "--owner", "web-3", "job"}, exitFree, "", "nothing released"},
	{[]string{"leader", "job"}, exitFree, `"job" has no leader`, ""},
}

func TestInspectionCreatesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	missing := []string{
		e.path("typo.db"),                      // no such file
		e.path("no-such-dir/sub/leases.db"),    // no such directory
		e.path("100% sure.db"),                 // % is literal in sqlite:PATH
		"./" + filepath.Base(e.path("rel.db")), // relative to the working directory
	}
	check := func(where string, in struct {
		args           []string
		code           int
		stdout, stderr string
	}, code int, stdout, stderr string) {
		t.Helper()
		if code != in.code || !strings.Contains(stdout, in.stdout) || !strings.Contains(stderr, in.stderr) ||
			(in.stderr == "" && stderr != "") || len(stderr) > 200 {
			t.Errorf("%s %q: exit %d, stdout %q, stderr %q; want exit %d, %q on stdout and %q on stderr",
				where, in.args, code, stdout, stderr, in.code, in.stdout, in.stderr)
		}
	}
	for _, path := range missing {
		for _, in := range inspections {
			p := e.start("inspect", startOpt{dir: e.dir}, "--store", "sqlite:"+path, in.args)
			code := p.wait(30 * time.Second)
			check(path, in, code, p.stdout(), p.stderr())
		}
	}
	// The default store, which run would create: nothing is created either.
	def := *e
	def.store = "" // TENURE_STORE empty: the default under $XDG_STATE_HOME
	for _, in := range inspections {
		code, stdout, stderr := def.run(in.args)
		check("the default store", in, code, stdout, stderr)
	}
	entries, err := os.ReadDir(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range entries {
		if !strings.HasSuffix(ent.Name(), ".stderr") && !strings.HasSuffix(ent.Name(), ".stdout") {
			t.Errorf("inspection created %s", ent.Name())
		}
	}
}

// fileSum returns a file's size, hash and modification time, to show that
// it did not change.
func fileSum(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		return "error: " + err.Error()
	}
	if fi.IsDir() {
		return fmt.Sprintf("dir %v", fi.ModTime())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprintf("%d %x %v", len(b), sha256.Sum256(b), fi.ModTime())
}

// A file or table that is not a tenure store: a sentence that says so,
// never a driver's message, and the file is left as it was; the same for
// run, which would otherwise create its table there.
func TestNotAStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mk := func(name, ddl string) string {
		path := e.path(name)
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(ddl); err != nil {
			t.Fatal(err)
		}
		return path
	}
	foreign := mk("foreign.db", `CREATE TABLE tenure_leases (id INTEGER PRIMARY KEY, name TEXT)`) // another app's table of the same name
	other := mk("other.db", `CREATE TABLE jobs (id INTEGER PRIMARY KEY)`)
	empty := e.path("empty.db")
	text := e.path("notes.db")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(text, []byte("shopping list: milk, eggs\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := e.path("a-directory")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	check := func(path string, args []string) {
		code, _, stderr := e.run("--store", "sqlite:"+path, args)
		if code != exitUnavailable || !strings.Contains(stderr, "not a tenure store") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%s %q: exit %d, want %d with one sentence saying it is not a tenure store:\n%s", filepath.Base(path), args, code, exitUnavailable, stderr)
		}
		for _, raw := range []string{"SQL logic error", "no such column", "no such table", "file is not a database", "(26)", "(1)"} {
			if strings.Contains(stderr, raw) {
				t.Errorf("%s %q: a driver's message reached the user: %s", filepath.Base(path), args, stderr)
			}
		}
	}
	for _, path := range []string{foreign, other, empty, text, dir} {
		before := fileSum(t, path)
		for _, in := range inspections {
			check(path, in.args)
		}
		if after := fileSum(t, path); after != before {
			t.Errorf("%s changed", filepath.Base(path))
		}
	}
	// run opens a store to create its table: refused too. (An empty file or
	// a database without tenure's table becomes a store.)
	for _, path := range []string{foreign, text, dir} {
		check(path, []string{"run", "job", "--", "true"})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files were created in the directory given as the store")
	}
}

// A store file the user may read but not write is opened read-only:
// status and list work, and nothing is written (no journal, no change).
func TestReadOnlyStore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.init()
	a := e.start("alpha", startOpt{}, "run", "--owner", "alpha", "job", "--", helper("-ready", e.path("ready")))
	info := waitReady(t, e.path("ready"), 10*time.Second)
	a.wait(10 * time.Second)
	b := e.start("beta", startOpt{stdinPipe: true}, "run", "--ttl", "30s", "--owner", "beta", "held", "--",
		helper("-ready", e.path("beta.ready"), "-hold", "stdin"))
	bi := waitReady(t, e.path("beta.ready"), 10*time.Second)

	// A copy of the store in a directory of its own, read-only to the user
	// who runs tenure (as root, tenure runs as nobody).
	roDir, err := os.MkdirTemp("", "tenure-ro-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(roDir, 0o755); os.RemoveAll(roDir) })
	ro := filepath.Join(roDir, "leases.db")
	cp := exec.Command("sqlite3", e.db, ".backup "+ro)
	if out, err := cp.CombinedOutput(); err != nil {
		// Without the sqlite3 tool, copy with the driver.
		db, err2 := sql.Open("sqlite", "file:"+e.db)
		if err2 != nil {
			t.Fatal(err2)
		}
		if _, err2 = db.Exec("VACUUM INTO ?", ro); err2 != nil {
			t.Fatalf("copy the store: %v %s; %v", err, out, err2)
		}
		db.Close()
	}
	if err := os.Chmod(ro, 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(roDir, 0o555); err != nil {
		t.Fatal(err)
	}
	var cred *syscall.Credential
	if os.Getuid() == 0 {
		cred = &syscall.Credential{Uid: 65534, Gid: 65534}
	}
	before := fileSum(t, ro)
	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(tenureBin, append([]string{"--store", "sqlite:" + ro}, args...)...)
		cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+roDir)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		_ = cmd.Run()
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}
	if code, stdout, stderr := run("status", "held"); code != 0 || !strings.Contains(stdout, bi.owner) {
		t.Errorf("status of a held lease in a read-only store: exit %d, want 0 naming %s:\n%s%s", code, bi.owner, stdout, stderr)
	}
	if code, stdout, stderr := run("status", "job"); code != exitFree {
		t.Errorf("status of a free lease in a read-only store: exit %d, want %d:\n%s%s", code, exitFree, stdout, stderr)
	}
	if code, stdout, stderr := run("list"); code != 0 || !strings.Contains(stdout, "held") {
		t.Errorf("list of a read-only store: exit %d:\n%s%s", code, stdout, stderr)
	}
	if after := fileSum(t, ro); after != before {
		t.Errorf("the read-only store changed")
	}
	if entries, _ := os.ReadDir(roDir); len(entries) != 1 {
		t.Errorf("files were created next to the read-only store: %v", entries)
	}
	if strings.Contains(fileSum(t, ro), "error") || info.token == 0 {
		t.Fatalf("the read-only store: %s", fileSum(t, ro))
	}
	b.stdin.Close()
	b.wait(10 * time.Second)
}

// On Cassandra, a keyspace that does not exist holds no lease: status says
// the resource is free (1), and creates no keyspace: a second look finds
// none either. run, which needs the keyspace, says that there is no store
// (66).
func TestInspectionCreatesNoKeyspace(t *testing.T) {
	t.Parallel()
	h := os.Getenv("TENURE_CASSANDRA")
	if h == "" {
		t.Skip("set TENURE_CASSANDRA to run this test (scripts/test does)")
	}
	e := newEnv(t)
	ks := strings.ReplaceAll(strings.ReplaceAll(uniqueResource("ks"), "/", "_"), "-", "_")
	e.store = "cassandra://" + h + "/" + ks
	for range 2 {
		code, stdout, stderr := e.run("status", "job")
		if code != exitFree || stdout != "\"job\" is free\n" || stderr != "" {
			t.Fatalf("status in a keyspace that does not exist: exit %d, want %d:\n%s%s", code, exitFree, stdout, stderr)
		}
	}
	code, stdout, stderr := e.run("run", "job", "--", "true")
	if code != exitNoStore || !strings.Contains(stderr, "no tenure store") || !strings.Contains(stderr, "tenure init") {
		t.Fatalf("run in a keyspace that does not exist: exit %d, want %d:\n%s%s", code, exitNoStore, stdout, stderr)
	}
}

// A bad store URL is refused with where it came from and the URL itself,
// redacted: a user who forgot that $TENURE_STORE is set finds it.
func TestBadStoreURLNamesItsSource(t *testing.T) {
	e := newEnv(t)
	e.store = "redis://:secretpw@127.0.0.1:1/x"
	code, _, errOut := e.run("status", "demo")
	if code != exitUsage || !strings.Contains(errOut, "$TENURE_STORE") || !strings.Contains(errOut, "redis://:xxxxx@127.0.0.1:1/x") || strings.Contains(errOut, "secretpw") {
		t.Errorf("status with a bad $TENURE_STORE: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = e.run("--store", "redis://:secretpw@127.0.0.1:1/x", "status", "demo")
	if code != exitUsage || !strings.Contains(errOut, "--store") || strings.Contains(errOut, "secretpw") {
		t.Errorf("status with a bad --store: exit %d, stderr %q", code, errOut)
	}
}
