package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/naming"
	"github.com/tenure-go/tenure/store/sqlite"
)

// inspect opens path with MustExist.
func inspect(path string) (*sqlite.Store, error) {
	return sqlite.Open(context.Background(), sqlite.Config{Path: path, MustExist: true})
}

// listing returns the files in dir, for checking that nothing was created.
func listing(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return strings.Join(names, ",")
}

// MustExist never creates a file, directory or table, and a place that is
// not a tenure store gets a sentence that says so.
func TestMustExist(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	foreign := filepath.Join(dir, "foreign.db")
	other := filepath.Join(dir, "other.db")
	for path, ddl := range map[string]string{
		foreign: `CREATE TABLE tenure_leases (id INTEGER PRIMARY KEY, name TEXT)`, // another app's table of the same name
		other:   `CREATE TABLE jobs (id INTEGER PRIMARY KEY)`,                     // a database without tenure's table
	} {
		db, err := sql.Open("sqlite", "file:"+path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.Exec(ddl); err != nil {
			t.Fatal(err)
		}
		db.Close()
	}
	cases := []struct {
		name, path string
		want       error
		says       string
	}{
		{"missing file", filepath.Join(dir, "missing.db"), driver.ErrNoStore, "does not exist"},
		{"missing directory", filepath.Join(dir, "nodir", "leases.db"), driver.ErrNoStore, "does not exist"},
		{"directory", dir, driver.ErrNotStore, "is a directory"},
		{"empty file", write("empty.db", nil), driver.ErrNotStore, "is an empty file"},
		{"not a database", write("text.db", []byte("hello, this is not a database file at all\n")), driver.ErrNotStore, "is not a SQLite database"},
		{"another app's table", foreign, driver.ErrNotStore, "has a table tenure_leases that is not tenure's"},
		{"no tenure table", other, driver.ErrNotStore, "without tenure's table"},
	}
	before := listing(t, dir)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := inspect(c.path)
			if err == nil {
				s.Close()
				t.Fatalf("opened %s", c.path)
			}
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), c.path) {
				t.Fatalf("error %q; want %v, saying %q and naming %s", err, c.want, c.says, c.path)
			}
			if strings.Contains(err.Error(), "SQL logic error") || strings.Contains(err.Error(), "no such column") || strings.Contains(err.Error(), "(26)") {
				t.Fatalf("error %q carries a raw driver message", err)
			}
		})
	}
	if after := listing(t, dir); after != before {
		t.Fatalf("files before %s, after %s", before, after)
	}
	// The default mode refuses the same places with the same sentences,
	// and never changes another application's table.
	for _, c := range cases[2:] {
		s, err := sqlite.Open(context.Background(), sqlite.Config{Path: c.path})
		if c.path == other || c.name == "empty file" {
			// A database without the table gets it (an empty file is an
			// empty SQLite database): the store is created in an existing
			// file, as documented.
			if err != nil {
				t.Fatalf("Open(%s): %v", c.path, err)
			}
			s.Close()
			continue
		}
		if err == nil {
			s.Close()
			t.Fatalf("Open(%s) succeeded", c.path)
		}
		if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.says) {
			t.Fatalf("Open(%s): %q; want %v saying %q", c.path, err, c.want, c.says)
		}
	}
}

// An existing store opened with MustExist works, and leaves the file as it
// was.
func TestMustExistWorks(t *testing.T) {
	ctx := context.Background()
	s, path := open(t)
	owner, _ := naming.NewOwner("a")
	rec, err := s.Acquire(ctx, "job", owner, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ro, err := inspect(path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	got, err := ro.Get(ctx, "job")
	if err != nil || got.Token != rec.Token {
		t.Fatalf("Get = %+v, %v; want token %d", got, err, rec.Token)
	}
	if err := ro.Release(ctx, "job", owner, rec.Token); err != nil {
		t.Fatalf("Release through a MustExist store: %v", err)
	}
}

// readOnlyEnv makes the test binary, run as an unprivileged user, open the
// file it names with MustExist and report what it sees (readOnlyMain).
const readOnlyEnv = "TENURE_SQLITE_READONLY"

// readOnlyMain lists the store at path and tries to acquire in it; it
// prints "list N" and the acquire error, or exits 1.
func readOnlyMain(path string, w io.Writer) int {
	s, err := inspect(path)
	if err != nil {
		fmt.Fprintln(w, "open:", err)
		return 1
	}
	defer s.Close()
	recs, err := s.List(context.Background(), "")
	if err != nil {
		fmt.Fprintln(w, "list:", err)
		return 1
	}
	fmt.Fprintln(w, "list", len(recs))
	owner, _ := naming.NewOwner("ro")
	_, err = s.Acquire(context.Background(), "other", owner, time.Minute)
	fmt.Fprintln(w, "acquire:", err)
	return 0
}

// A file the user may only read is opened read-only: List works (whether
// or not another process has the store open), and a write says that the
// file is read-only. As root the test runs itself as nobody; otherwise it
// takes the write permission away.
func TestMustExistReadOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "leases.db")
	holder, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	owner, _ := naming.NewOwner("holder")
	if _, err := holder.Acquire(context.Background(), "held", owner, time.Minute); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T) string {
		t.Helper()
		bin := os.Args[0]
		cmd := exec.Command(bin, "-test.run=^$")
		cmd.Env = append(os.Environ(), readOnlyEnv+"="+path)
		if os.Geteuid() == 0 {
			// Run a copy of the test binary as nobody, in directories
			// nobody may read but not write.
			bin = filepath.Join(dir, "ro.test")
			copyFile(t, os.Args[0], bin)
			for _, d := range []string{dir, filepath.Dir(dir)} {
				if err := os.Chmod(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd.Path, cmd.Args[0] = bin, bin
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		} else {
			for _, p := range []string{path, dir} {
				if err := os.Chmod(p, 0o555); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { os.Chmod(dir, 0o755); os.Chmod(path, 0o644) })
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("read-only process: %v\n%s", err, out)
		}
		return string(out)
	}
	check := func(t *testing.T, out string) {
		t.Helper()
		if !strings.Contains(out, "list 1") || !strings.Contains(out, "read-only") {
			t.Fatalf("read-only process said:\n%s\nwant list 1 and an acquire error saying read-only", out)
		}
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("WhileOpen", func(t *testing.T) { check(t, run(t)) })
	holder.Close() // the last handle: SQLite removes the -wal and -shm files
	t.Run("Closed", func(t *testing.T) { check(t, run(t)) })
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
