package storeurl_test

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/storeurl"
	"github.com/tenure-go/tenure/store/memory"
)

func TestOpenSQLiteForms(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	abs := filepath.Join(dir, "abs.db")
	cases := []struct {
		raw, file string
	}{
		{"sqlite:" + abs, abs},
		{"sqlite://" + abs, abs},
		{"sqlite://localhost" + abs, abs},
		{"sqlite:rel.db", filepath.Join(dir, "rel.db")},
		{"sqlite://./dotrel.db", filepath.Join(dir, "dotrel.db")},
		{"SQLITE:upper.db", filepath.Join(dir, "upper.db")},
		{"sqlite:timeout.db?busy_timeout=250ms", filepath.Join(dir, "timeout.db")},
		{"sqlite://" + filepath.Join(dir, "a%20b.db"), filepath.Join(dir, "a b.db")},
	}
	for _, c := range cases {
		t.Run(c.raw, func(t *testing.T) {
			s, err := storeurl.Open(context.Background(), c.raw)
			if err != nil {
				t.Fatalf("Open(%q): %v", c.raw, err)
			}
			defer s.Close()
			// The store works, and it is the file the URL names.
			if _, err := s.Acquire(context.Background(), "r", "me#0000000000000001", time.Minute); err != nil {
				t.Fatalf("Acquire: %v", err)
			}
			if _, err := os.Stat(c.file); err != nil {
				t.Fatalf("Open(%q) did not open %s: %v", c.raw, c.file, err)
			}
		})
	}
}

func TestOpenSharesOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	a, err := storeurl.Open(context.Background(), "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := storeurl.Open(context.Background(), "sqlite:///"+strings.TrimPrefix(path, "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rec, err := a.Acquire(context.Background(), "job", "a#0000000000000001", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Get(context.Background(), "job")
	if err != nil {
		t.Fatalf("the second handle does not see the lease: %v", err)
	}
	if got.Owner != rec.Owner || got.Token != rec.Token {
		t.Fatalf("Get = %+v, want owner %s token %d", got, rec.Owner, rec.Token)
	}
}

func TestOpenBadURL(t *testing.T) {
	for _, raw := range []string{
		"",
		"   ",
		"bogus://x",
		"postgresx:whatever",
		"/tmp/leases.db",
		"leases.db",
		"sqlite:",
		"sqlite://",
		"sqlite://otherhost/tmp/x.db",
		"sqlite:x.db?journal=off",
		"sqlite:x.db?busy_timeout=soon",
		"sqlite:x.db#frag",
		"sqlite:///tmp/a%3Fb.db",
		"%zz://x",
		"://x",
	} {
		t.Run(raw, func(t *testing.T) {
			s, err := storeurl.Open(context.Background(), raw)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", raw)
			}
			if !errors.Is(err, storeurl.ErrBadURL) {
				t.Fatalf("Open(%q) = %v, want ErrBadURL", raw, err)
			}
			if errors.Is(err, storeurl.ErrUnavailable) {
				t.Fatalf("Open(%q) = %v, matches ErrUnavailable too", raw, err)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Fatalf("error spans lines: %q", err)
			}
		})
	}
}

func TestUnknownSchemeNamesKnownOnes(t *testing.T) {
	_, err := storeurl.Open(context.Background(), "bogus://x")
	if err == nil || !strings.Contains(err.Error(), "sqlite:") || !strings.Contains(err.Error(), `"bogus:"`) {
		t.Fatalf("error %q should name the unknown scheme and the known ones", err)
	}
	_, err = storeurl.Open(context.Background(), "/tmp/leases.db")
	if err == nil || !strings.Contains(err.Error(), "sqlite:/tmp/leases.db") {
		t.Fatalf("error %q should suggest sqlite:/tmp/leases.db", err)
	}
}

func TestOpenUnavailable(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, raw := range []string{
		"sqlite:/nonexistent-dir-for-tenure-tests/x.db",
		"sqlite:" + filepath.Join(notDir, "x.db"),
		"sqlite:" + dir, // a directory, not a database file
	} {
		t.Run(raw, func(t *testing.T) {
			start := time.Now()
			s, err := storeurl.Open(context.Background(), raw)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", raw)
			}
			if !errors.Is(err, storeurl.ErrUnavailable) || errors.Is(err, storeurl.ErrBadURL) {
				t.Fatalf("Open(%q) = %v, want ErrUnavailable only", raw, err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("Open took %v", d)
			}
		})
	}
}

// memtestURL is the last URL the memtest scheme was opened with.
var memtestURL string

// Registered once per process, so that go test -count=N works.
func init() {
	storeurl.Register("memtest", func(ctx context.Context, raw string) (driver.Store, error) {
		memtestURL = raw
		switch {
		case strings.Contains(raw, "fail=1"):
			return nil, errors.New("connection refused")
		case strings.Contains(raw, "bad=1"):
			return nil, storeurl.BadURL(errBadParam)
		}
		return memory.New(), nil
	}, "memtest:  an in-memory store for this test")
}

var errBadParam = errors.New("memtest: bad parameter")

// memtestInits counts the calls of memtest's init function.
var memtestInits int

func init() {
	storeurl.RegisterInit("memtest", func(ctx context.Context, raw string) error {
		memtestInits++
		if strings.Contains(raw, "fail=1") {
			return errors.New("permission denied for schema public")
		}
		return nil
	})
}

func TestInit(t *testing.T) {
	before := memtestInits
	if err := storeurl.Init(context.Background(), "memtest://h/x"); err != nil {
		t.Fatal(err)
	}
	if memtestInits != before+1 {
		t.Fatalf("the init function ran %d times", memtestInits-before)
	}
	err := storeurl.Init(context.Background(), "memtest://u:secret@h/x?fail=1")
	if !errors.Is(err, storeurl.ErrUnavailable) || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Init = %v, want ErrUnavailable with the store's error and no password", err)
	}
	if err := storeurl.Init(context.Background(), "bogus://x"); !errors.Is(err, storeurl.ErrBadURL) {
		t.Fatalf("Init(bogus://x) = %v, want ErrBadURL", err)
	}
	// Without an init function: open and close, which creates a SQLite file.
	path := filepath.Join(t.TempDir(), "leases.db")
	if err := storeurl.Init(context.Background(), "sqlite:"+path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("Init did not create the SQLite file: %v", err)
	}
	if err := storeurl.Init(context.Background(), "sqlite:/nonexistent-dir-for-tenure-tests/x.db"); !errors.Is(err, storeurl.ErrUnavailable) {
		t.Fatalf("Init of an unreachable file = %v, want ErrUnavailable", err)
	}
	for _, f := range []func(){
		func() { storeurl.RegisterInit("memtest", func(context.Context, string) error { return nil }) },
		func() { storeurl.RegisterInit("unregistered", func(context.Context, string) error { return nil }) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("RegisterInit did not panic")
				}
			}()
			f()
		}()
	}
}

func TestRegister(t *testing.T) {
	// The open function gets the URL as written, even one that net/url
	// rejects (hosts listed as Cassandra lists them).
	for _, raw := range []string{"memtest://user:secret@host/x", "MemTest://u:pw@h1:9042,h2/ks"} {
		s, err := storeurl.Open(context.Background(), raw)
		if err != nil {
			t.Fatalf("Open(%q): %v", raw, err)
		}
		s.Close()
		if memtestURL != raw {
			t.Fatalf("open func got %q, want %q", memtestURL, raw)
		}
	}

	_, err := storeurl.Open(context.Background(), "memtest://user:secret@h1:9042,h2/x?fail=1")
	if !errors.Is(err, storeurl.ErrUnavailable) || errors.Is(err, storeurl.ErrBadURL) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Open = %v, want ErrUnavailable wrapping the store's error", err)
	}
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("error %q shows the password", err)
	}
	_, err = storeurl.Open(context.Background(), "memtest://h/x?bad=1")
	if !errors.Is(err, storeurl.ErrBadURL) || !errors.Is(err, errBadParam) || errors.Is(err, storeurl.ErrUnavailable) {
		t.Fatalf("Open = %v, want ErrBadURL wrapping the store's error", err)
	}

	var names []string
	for _, s := range storeurl.Schemes() {
		names = append(names, s.Name)
		if s.Doc == "" {
			t.Errorf("scheme %s has no doc", s.Name)
		}
	}
	if strings.Join(names, ",") != "memtest,sqlite" {
		t.Fatalf("Schemes() = %v, want [memtest sqlite] sorted", names)
	}
	if !storeurl.Registered("sqlite") || !storeurl.Registered("MEMTEST") || storeurl.Registered("bogus") {
		t.Fatalf("Registered is wrong")
	}

	for _, bad := range []string{"sqlite", "Upper", "1abc", "", "a b"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q) did not panic", bad)
				}
			}()
			storeurl.Register(bad, func(context.Context, string) (driver.Store, error) { return nil, nil }, "")
		}()
	}
}

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"postgres://u:secret@host/db":   "postgres://u:xxxxx@host/db",
		"cassandra://u:secret@h1:1,h2/": "cassandra://u:xxxxx@h1:1,h2/",
		"sqlite:/tmp/x.db":              "sqlite:/tmp/x.db",
		"redis://host:6379/0":           "redis://host:6379/0",
	} {
		if got := storeurl.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}

func TestDefaultSQLitePath(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	t.Setenv("XDG_STATE_HOME", state)
	p, err := storeurl.DefaultSQLitePath()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(state, "tenure", "leases.db"); p != want {
		t.Fatalf("DefaultSQLitePath() = %s, want %s", p, want)
	}
	st, err := os.Stat(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v, want 0700", st.Mode().Perm())
	}

	// XDG_STATE_HOME unset or relative: ~/.local/state.
	home := t.TempDir()
	t.Setenv("HOME", home)
	for _, v := range []string{"", "relative/dir"} {
		t.Setenv("XDG_STATE_HOME", v)
		p, err := storeurl.DefaultSQLitePath()
		if err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(home, ".local", "state", "tenure", "leases.db"); p != want {
			t.Fatalf("XDG_STATE_HOME=%q: DefaultSQLitePath() = %s, want %s", v, p, want)
		}
	}
	// The default path opens.
	s, err := storeurl.Open(context.Background(), "sqlite:"+p)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

func TestSQLitePathHome(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	u, _ := url.Parse("sqlite:~/x.db")
	p, err := storeurl.SQLitePath(u)
	if err != nil || p != filepath.Join(home, "x.db") {
		t.Fatalf("SQLitePath(sqlite:~/x.db) = %q, %v", p, err)
	}
}
