package store_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
	_ "github.com/tenure-go/tenure/store/all"
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
		// In sqlite:PATH, '%' is a character like any other.
		{"sqlite:" + filepath.Join(dir, "50%.db"), filepath.Join(dir, "50%.db")},
		{"sqlite:" + filepath.Join(dir, "a%41.db"), filepath.Join(dir, "a%41.db")},
		{"sqlite:pct%20rel.db", filepath.Join(dir, "pct%20rel.db")},
	}
	for _, c := range cases {
		t.Run(c.raw, func(t *testing.T) {
			s, err := store.Open(context.Background(), c.raw)
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
	// Nothing else was created: every file is one the cases name (with
	// SQLite's -wal and -shm).
	want := map[string]bool{}
	for _, c := range cases {
		want[filepath.Base(c.file)] = true
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		name := strings.TrimSuffix(strings.TrimSuffix(e.Name(), "-wal"), "-shm")
		if !want[name] {
			t.Errorf("unexpected file %s", e.Name())
		}
	}
}

func TestOpenSharesOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	a, err := store.Open(context.Background(), "sqlite:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := store.Open(context.Background(), "sqlite:///"+strings.TrimPrefix(path, "/"))
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

// badURLs are URLs that Parse, Open and Init refuse with ErrBadURL before
// any I/O, in every scheme: malformed, unknown schemes, ports outside
// 1..65535, unknown parameters, bad values.
var badURLs = []string{
	"",
	"   ",
	"bogus://x",
	"postgresx:whatever",
	"/tmp/leases.db",
	"leases.db",
	"%zz://x",
	"://x",

	"sqlite:",
	"sqlite://",
	"sqlite://otherhost/tmp/x.db",
	"sqlite:x.db?journal=off",
	"sqlite:x.db?busy_timeout=soon",
	"sqlite:x.db?busy_timeout=0s",
	"sqlite:x.db#frag",
	"sqlite:///tmp/a%3Fb.db",
	"sqlite:///tmp/a%zzb.db",

	"cassandra://127.0.0.1:0/ks",
	"cassandra://127.0.0.1:65536/ks",
	"cassandra://127.0.0.1:99999/ks",
	"cassandra://127.0.0.1/ks?bogus=1",
	"cassandra://127.0.0.1/ks?ca=/nonexistent/ca.pem",

	"postgres://u@127.0.0.1:0/db",
	"postgres://u@127.0.0.1:65536/db",
	"postgresql://u@127.0.0.1:99999/db",
	"postgres://u@127.0.0.1/db?bogus=1",
	"postgres://u@127.0.0.1/db?search_path=x",
	"postgres://u@127.0.0.1/db?sslmode=sometimes",

	"etcd://127.0.0.1:0",
	"etcd://127.0.0.1:65536",
	"etcd://127.0.0.1:2379,127.0.0.1:99999",
	"etcd://127.0.0.1",
	"etcd://127.0.0.1:2379?bogus=1",
	"etcd://127.0.0.1:2379?ca=/nonexistent/ca.pem",

	"mysql://u@127.0.0.1:0/db",
	"mysql://u@127.0.0.1:65536/db",
	"mariadb://u@127.0.0.1:99999/db",
	"mysql://u@127.0.0.1/db?bogus=1",
	"mysql://u@127.0.0.1/db?sql_mode=ANSI",
	"mysql://u@127.0.0.1/db?ca=/nonexistent/ca.pem",

	"redis://127.0.0.1:0",
	"redis://127.0.0.1:65536/0",
	"rediss://127.0.0.1:99999",
	"redis://127.0.0.1:6379?bogus=1",
	"rediss://127.0.0.1:6379?ca=/nonexistent/ca.pem",

	"memory:x",
	"memory:?bogus=1",
}

func TestBadURLs(t *testing.T) {
	for _, raw := range badURLs {
		t.Run(raw, func(t *testing.T) {
			check := func(what string, err error) {
				t.Helper()
				if !errors.Is(err, store.ErrBadURL) || errors.Is(err, store.ErrUnavailable) {
					t.Fatalf("%s(%q) = %v, want ErrBadURL only", what, raw, err)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("error spans lines: %q", err)
				}
			}
			_, err := store.Parse(raw)
			check("Parse", err)
			// Open and Init fail the same way, and fast: no connection is
			// tried (the ports above would refuse or time out).
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			s, err := store.Open(ctx, raw)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", raw)
			}
			check("Open", err)
			check("Init", store.Init(ctx, raw))
		})
	}
}

func TestUnknownSchemeNamesKnownOnes(t *testing.T) {
	_, err := store.Open(context.Background(), "bogus://x")
	if err == nil || !strings.Contains(err.Error(), "sqlite:") || !strings.Contains(err.Error(), "postgresql:") || !strings.Contains(err.Error(), `"bogus:"`) {
		t.Fatalf("error %q should name the unknown scheme and the known ones", err)
	}
	_, err = store.Open(context.Background(), "/tmp/leases.db")
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
			s, err := store.Open(context.Background(), raw)
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", raw)
			}
			if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrBadURL) {
				t.Fatalf("Open(%q) = %v, want ErrUnavailable only", raw, err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Fatalf("Open took %v", d)
			}
		})
	}
}

// Every limit is known from the URL, before anything is opened.
func TestCheckTTL(t *testing.T) {
	for _, c := range []struct {
		raw       string
		ok, notOK []time.Duration
	}{
		{"sqlite:/nonexistent-dir-for-tenure-tests/x.db", []time.Duration{time.Millisecond, 30 * time.Second, 1_000_000 * time.Hour},
			[]time.Duration{0, -time.Second, 999 * time.Microsecond, 1_300_000 * time.Hour}},
		{"postgres://u@127.0.0.1:1/db", []time.Duration{time.Millisecond, 1_000_000 * time.Hour},
			[]time.Duration{time.Microsecond, 1_300_000 * time.Hour}},
		{"redis://127.0.0.1:1", []time.Duration{time.Millisecond}, []time.Duration{time.Microsecond, 1_300_000 * time.Hour}},
		{"mysql://u@127.0.0.1:1/db", []time.Duration{time.Microsecond, 1_000_000 * time.Hour},
			[]time.Duration{time.Microsecond - 1, 1_300_000 * time.Hour}},
		{"etcd://127.0.0.1:1", []time.Duration{time.Second, 1_300_000 * time.Hour}, []time.Duration{999 * time.Millisecond, 9_000_000_001 * time.Second}},
		{"cassandra://127.0.0.1:1/ks", []time.Duration{time.Second, 24 * time.Hour}, []time.Duration{500 * time.Millisecond, 630720000 * time.Second}},
		{"memory:", []time.Duration{time.Nanosecond, 1_300_000 * time.Hour}, []time.Duration{0}},
	} {
		u, err := store.Parse(c.raw)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.raw, err)
		}
		for _, ttl := range c.ok {
			if err := u.CheckTTL(ttl); err != nil {
				t.Errorf("%s: CheckTTL(%v) = %v", c.raw, ttl, err)
			}
		}
		for _, ttl := range c.notOK {
			if err := u.CheckTTL(ttl); !errors.Is(err, driver.ErrInvalidTTL) {
				t.Errorf("%s: CheckTTL(%v) = %v, want ErrInvalidTTL", c.raw, ttl, err)
			}
		}
	}
	// Parsing and checking created nothing.
	if _, err := os.Stat("/nonexistent-dir-for-tenure-tests"); err == nil {
		t.Fatal("the directory was created")
	}
}

// A SQLite store opened with Inspect creates nothing, and says what is
// wrong in a sentence.
func TestInspect(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	missing := filepath.Join(dir, "sub", "leases.db")
	_, err := store.Open(ctx, "sqlite:"+missing, store.Inspect())
	if !errors.Is(err, store.ErrNoStore) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Inspect of a missing file: %v; want ErrNoStore naming the path", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "sub")); err == nil {
		t.Fatal("Inspect created the directory")
	}
	if _, err := store.Open(ctx, "sqlite:"+dir, store.Inspect()); !errors.Is(err, store.ErrNotStore) {
		t.Fatalf("Inspect of a directory: %v; want ErrNotStore", err)
	}
	// The default mode creates the file; Inspect then opens it.
	path := filepath.Join(dir, "leases.db")
	if err := store.Init(ctx, "sqlite:"+path); err != nil {
		t.Fatal(err)
	}
	s, err := store.Open(ctx, "sqlite:"+path, store.Inspect())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.List(ctx, ""); err != nil {
		t.Fatal(err)
	}
	// Stores without files: Inspect changes nothing for them.
	m, err := store.Open(ctx, "memory:", store.Inspect())
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
}

func TestInitCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "leases.db")
	if err := store.Init(context.Background(), "sqlite:"+path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("Init did not create the SQLite file: %v", err)
	}
	if err := store.Init(context.Background(), "sqlite:/nonexistent-dir-for-tenure-tests/x.db"); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Init of an unreachable file = %v, want ErrUnavailable", err)
	}
	// A store without Init is opened and closed.
	if err := store.Init(context.Background(), "memory:"); err != nil {
		t.Fatal(err)
	}
}

// memtest is a store of this test: it records what it was asked.
type memtestConfig struct {
	raw, hook string
	inspect   bool
}

var (
	memtestOpened []memtestConfig
	memtestInits  int
	errBadParam   = errors.New("memtest: bad parameter")
)

// Registered once per process, so that go test -count=N works.
func init() {
	store.Register(store.Driver[memtestConfig, *memory.Store]{
		Schemes: []string{"memtest", "memtest2"},
		Usage:   "memtest:  an in-memory store for this test",
		Secrets: []string{"apikey"},
		Parse: func(raw string) (memtestConfig, error) {
			if strings.Contains(raw, "bad=1") {
				return memtestConfig{}, errBadParam
			}
			if strings.Contains(raw, "badsecret=1") {
				return memtestConfig{}, errors.New("cannot use " + raw)
			}
			return memtestConfig{raw: raw}, nil
		},
		Open: func(ctx context.Context, c memtestConfig) (*memory.Store, error) {
			memtestOpened = append(memtestOpened, c)
			if strings.Contains(c.raw, "fail=1") {
				return nil, errors.New("connection refused while opening " + c.raw)
			}
			return memory.New(), nil
		},
		Inspect: func(c *memtestConfig) { c.inspect = true },
		Init: func(ctx context.Context, c memtestConfig) error {
			memtestInits++
			if strings.Contains(c.raw, "fail=1") {
				return errors.New("permission denied for schema public")
			}
			return nil
		},
		CheckTTL: func(c memtestConfig, ttl time.Duration) error {
			if ttl < time.Second {
				return driver.ErrInvalidTTL
			}
			return nil
		},
	})
}

func TestRegister(t *testing.T) {
	// The driver gets the URL as written, even one that net/url rejects
	// (hosts listed as Cassandra lists them), in every scheme it has.
	for _, raw := range []string{"memtest://user:secret@host/x", "MemTest://u:pw@h1:9042,h2/ks", "memtest2:x"} {
		s, err := store.Open(context.Background(), raw)
		if err != nil {
			t.Fatalf("Open(%q): %v", raw, err)
		}
		s.Close()
		if got := memtestOpened[len(memtestOpened)-1]; got.raw != raw || got.inspect {
			t.Fatalf("Open got %+v, want %q without inspect", got, raw)
		}
	}
	s, err := store.Open(context.Background(), "memtest:x", store.Inspect())
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !memtestOpened[len(memtestOpened)-1].inspect {
		t.Fatal("Inspect did not reach the driver's configuration")
	}

	// Config gives the driver's configuration, to change before Open.
	u, err := store.Parse("memtest:x")
	if err != nil {
		t.Fatal(err)
	}
	u.Config().(*memtestConfig).hook = "set"
	if s, err := u.Open(context.Background()); err != nil {
		t.Fatal(err)
	} else {
		s.Close()
	}
	if got := memtestOpened[len(memtestOpened)-1]; got.hook != "set" {
		t.Fatalf("Open got %+v, want the changed configuration", got)
	}
	if u.Scheme() != "memtest" || u.CheckTTL(time.Millisecond) == nil || u.CheckTTL(time.Second) != nil {
		t.Fatalf("Scheme %q or CheckTTL wrong", u.Scheme())
	}

	_, err = store.Open(context.Background(), "memtest://user:secret@h1:9042,h2/x?fail=1&apikey=k3y")
	if !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrBadURL) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Open = %v, want ErrUnavailable wrapping the store's error", err)
	}
	if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "k3y") {
		t.Fatalf("error %q shows a secret", err)
	}
	_, err = store.Open(context.Background(), "memtest://h/x?bad=1")
	if !errors.Is(err, store.ErrBadURL) || !errors.Is(err, errBadParam) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Open = %v, want ErrBadURL wrapping the store's error", err)
	}
	// A driver's parse error that repeats the URL shows no secret.
	_, err = store.Parse("memtest://u:hunter22@h/x?badsecret=1&password=pw0rd")
	if !errors.Is(err, store.ErrBadURL) || strings.Contains(err.Error(), "hunter22") || strings.Contains(err.Error(), "pw0rd") {
		t.Fatalf("Parse = %v, want ErrBadURL without secrets", err)
	}

	before := memtestInits
	if err := store.Init(context.Background(), "memtest://h/x"); err != nil {
		t.Fatal(err)
	}
	if memtestInits != before+1 {
		t.Fatalf("the init function ran %d times", memtestInits-before)
	}
	err = store.Init(context.Background(), "memtest://u:secret@h/x?fail=1")
	if !errors.Is(err, store.ErrUnavailable) || strings.Contains(err.Error(), "secret") || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("Init = %v, want ErrUnavailable with the store's error and no password", err)
	}

	var names []string
	for _, s := range store.Schemes() {
		names = append(names, s.Name)
		if s.Usage == "" {
			t.Errorf("scheme %s has no usage", s.Name)
		}
		if s.Name == "memtest" && strings.Join(s.Aliases, ",") != "memtest2" {
			t.Errorf("memtest aliases %v", s.Aliases)
		}
	}
	if got := strings.Join(names, ","); got != "cassandra,etcd,memory,memtest,mysql,postgres,redis,sqlite" {
		t.Fatalf("Schemes() = %v, want one per store, sorted", got)
	}

	bad := []store.Driver[memtestConfig, *memory.Store]{
		{Schemes: []string{"sqlite"}},   // taken
		{Schemes: []string{"Upper"}},    // not lower case
		{Schemes: []string{"1abc"}},     // not a letter first
		{Schemes: []string{"a b"}},      // a space
		{Schemes: nil},                  // none
		{Schemes: []string{"fresh"}},    // no Parse and Open
		{Schemes: []string{"memtest2"}}, // taken, as an alias
	}
	for i, d := range bad {
		if i < len(bad)-2 || i == len(bad)-1 {
			d.Parse = func(string) (memtestConfig, error) { return memtestConfig{}, nil }
			d.Open = func(context.Context, memtestConfig) (*memory.Store, error) { return memory.New(), nil }
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%v) did not panic", d.Schemes)
				}
			}()
			store.Register(d)
		}()
	}
}

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"postgres://u:secret@host/db":                           "postgres://u:xxxxx@host/db",
		"mysql://u:secret@host:3306/db?tls=true":                "mysql://u:xxxxx@host:3306/db?tls=true",
		"cassandra://u:secret@h1:1,h2/":                         "cassandra://u:xxxxx@h1:1,h2/",
		"sqlite:/tmp/x.db":                                      "sqlite:/tmp/x.db",
		"redis://host:6379/0":                                   "redis://host:6379/0",
		"postgres://u@h/db?sslmode=require&password=s3":         "postgres://u@h/db?sslmode=require&password=xxxxx",
		"postgres://u@h/db?sslpassword=s3&sslkey=/k.pem":        "postgres://u@h/db?sslpassword=xxxxx&sslkey=/k.pem",
		"postgresql://u@h/db?SSLPassword=s3":                    "postgresql://u@h/db?SSLPassword=xxxxx",
		"etcd://h1:2379,h2:2379?username=u&password=p%40ss":     "etcd://h1:2379,h2:2379?username=u&password=xxxxx",
		"etcd://root:s%40cret@h1:2379,h2:2379/?tls=true":        "etcd://root:xxxxx@h1:2379,h2:2379/?tls=true",
		"bogus://u:p@h/x?password=p&sslpassword=q":              "bogus://u:xxxxx@h/x?password=xxxxx&sslpassword=q",
		"memtest://h/x?apikey=k&other=v#frag":                   "memtest://h/x?apikey=xxxxx&other=v#frag",
		"rediss://:pw@cache:6380/0?dial_timeout=1s":             "rediss://:xxxxx@cache:6380/0?dial_timeout=1s",
		"postgres://u:p@ss@h/db":                                "postgres://u:xxxxx@h/db",
		"postgres://u@h/db?password":                            "postgres://u@h/db?password",
		"cassandra://u:pw@[::1]:9042,[::2]/ks?table=t&mode=jae": "cassandra://u:xxxxx@[::1]:9042,[::2]/ks?table=t&mode=jae",
		// The scheme forgotten: the user reads as a scheme, or there is none.
		"nobody:s3cret@127.0.0.1/x":   "nobody:xxxxx@127.0.0.1/x",
		"//nobody:s3cret@127.0.0.1/x": "//nobody:xxxxx@127.0.0.1/x",
		"u:p@ss@h/db?password=p":      "u:xxxxx@h/db?password=xxxxx",
		"sqlite:/tmp/a@b:c.db":        "sqlite:/tmp/a@b:c.db",
		// A known scheme without its slashes.
		"postgres:u:s3cret@127.0.0.1/db": "postgres:u:xxxxx@127.0.0.1/db",
		"redis:u:s3cret@h:6379/0":        "redis:u:xxxxx@h:6379/0",
		"mysql:u:s3cret@h:3306/db":       "mysql:u:xxxxx@h:3306/db",
		"sqlite:x.db":                    "sqlite:x.db",
		// libpq's keyword/value settings, which have no scheme.
		"host=127.0.0.1 password=s3cret":                  "host=127.0.0.1 password=xxxxx",
		"host=h password='a b' SSLPassword=k user=u":      "host=h password=xxxxx SSLPassword=xxxxx user=u",
		"  password = s3cret dbname=x":                    "  password = xxxxx dbname=x",
		"user=u passwordless=yes password='it''s' port=1": "user=u passwordless=yes password=xxxxx port=1",
		// A '/', '?' or '#' in a password that is not percent-encoded; a
		// short slash; a backslash-escaped space; a quoted string; and what
		// must stay as it is.
		"postgres://u:S1/S2@127.0.0.1:1/db":       "postgres://u:xxxxx@127.0.0.1:1/db",
		"postgres://u:S1#S2@h/db":                 "postgres://u:xxxxx@h/db",
		"postgres://u:S1?S2@h/db?password=p":      "postgres://u:xxxxx@h/db?password=xxxxx",
		"etcd://u:S1/S2@h:2379":                   "etcd://u:xxxxx@h:2379",
		"postgres:/u:s3cret@h:1/db":               "postgres:/u:xxxxx@h:1/db",
		"redis:/u:s3cret@h:1/0":                   "redis:/u:xxxxx@h:1/0",
		`host=h password=SEC\ RET user=u`:         "host=h password=xxxxx user=u",
		`"host=h password=s3cret"`:                `"host=h password=xxxxx`,
		"sqlite:leases:s@x.db":                    "sqlite:leases:s@x.db",
		"redis://h:6379/0?client_name=x@y":        "redis://h:6379/0?client_name=x@y",
		"cassandra://h1,h2/ks?consistency=quorum": "cassandra://h1,h2/ks?consistency=quorum",
	} {
		if got := store.Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
	u, err := store.Parse("postgres://u:s3cret@127.0.0.1:1/db?sslpassword=k3y")
	if err != nil {
		t.Fatal(err)
	}
	if s := u.String(); strings.Contains(s, "s3cret") || strings.Contains(s, "k3y") {
		t.Fatalf("String() = %q shows a secret", s)
	}
}

// A SQLite path has no user information: a path that holds ':' and '@' is
// shown as written, not taken apart as a password.
func TestSQLitePathNotRedacted(t *testing.T) {
	dir := t.TempDir()
	raw := "sqlite:" + dir + "/no-such-dir/leases:s@x.db"
	_, err := store.Open(context.Background(), raw)
	if err == nil || !strings.Contains(err.Error(), "leases:s@x.db") {
		t.Fatalf("Open(%q) = %v; want an error that names the path as written", raw, err)
	}
}

// An '@', '/', '?' or '#' in the user information that is not
// percent-encoded is refused before any I/O by every store with user
// information: pgx splits such a URL at its first '@' (the rest of the
// password became a host name, looked up and shown in the error), Go's
// net/url at its first '/' and last '@' (a password before a '/' became a
// port, shown in the error). An '@' in a query value is not user
// information. A store URL must have its "//".
func TestUnescapedDelimitersInUserinfo(t *testing.T) {
	for _, raw := range []string{
		"postgres://u:s3@cret@127.0.0.1:1/db",
		"redis://u:s3@cret@127.0.0.1:1/0",
		"etcd://u:s3@cret@127.0.0.1:1",
		"cassandra://u:s3@cret@127.0.0.1:1/ks",
		"postgres://u:s3/cret@127.0.0.1:1/db",
		"postgres://u:1234/cret@127.0.0.1:1/db",
		"redis://u:s3#cret@127.0.0.1:1/0",
		"etcd://u:s3?cret@127.0.0.1:1",
		"cassandra://u:s3/cret@127.0.0.1:1/ks",
	} {
		_, err := store.Parse(raw)
		if !errors.Is(err, store.ErrBadURL) || !strings.Contains(err.Error(), "%40") {
			t.Errorf("Parse(%q) = %v; want ErrBadURL saying to percent-encode it", raw, err)
		} else if strings.Contains(err.Error(), "cret") {
			t.Errorf("Parse(%q): %q shows part of the password", raw, err)
		}
	}
	for _, raw := range []string{
		"postgres://u:s3%40cret%2Fx@127.0.0.1:1/db",
		"redis://h:6379/0?client_name=x@y",
		"postgres://u:pw@h:5432/db?application_name=a@b",
	} {
		if _, err := store.Parse(raw); err != nil {
			t.Errorf("Parse(%q): %v", raw, err)
		}
	}
	for _, raw := range []string{"postgres:/u:s3cret@127.0.0.1:1/db", "redis:/u:s3cret@127.0.0.1:1/0"} {
		_, err := store.Parse(raw)
		if !errors.Is(err, store.ErrBadURL) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Parse(%q) = %v; want ErrBadURL without the password", raw, err)
		}
	}
}

// Secrets in a URL never reach the errors of the real drivers either.
func TestErrorsHideSecrets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, raw := range []string{
		"postgres://u:pg-s3cret@127.0.0.1:1/db?connect_timeout=1&sslpassword=pg-k3y",
		"postgres://u@127.0.0.1:1/db?connect_timeout=1&password=pg-s3cret",
		"postgres://u:pg-s3cret@127.0.0.1:1/db?bogus=1",
		"postgres://u:pg-s3cret@127.0.0.1:99999/db",
		"etcd://u:et-s3cret@127.0.0.1:1?dial_timeout=500ms",
		"etcd://127.0.0.1:1?password=et-s3cret&dial_timeout=500ms",
		"etcd://127.0.0.1:1?password=et-s3cret&bogus=1",
		"redis://u:rd-s3cret@127.0.0.1:1?dial_timeout=500ms",
		"redis://u:rd-s3cret@127.0.0.1:1?bogus=1",
		"redis://127.0.0.1:1?password=rd-s3cret",
		"cassandra://u:cs-s3cret@127.0.0.1:1/ks?connect_timeout=500ms",
		"cassandra://u:cs-s3cret@127.0.0.1:1/ks?bogus=1",
		"mysql://u:my-s3cret@127.0.0.1:1/db?timeout=500ms",
		"mysql://u:my-s3cret@127.0.0.1:1/db?bogus=1",
		"mysql://u:my-s3cret/x@127.0.0.1:1/db",
		"mysql://u:my-s3cret@127.0.0.1:99999/db",
		"mariadb:u:my-s3cret@127.0.0.1:1/db",
		// Forms the redaction did not know.
		"postgres:u:pg-s3cret@127.0.0.1/db",
		"host=127.0.0.1 port=1 password=pg-s3cret",
		"host=127.0.0.1 port=1 password='pg-s3cret x'",
		"postgres://u:pg-s3cret/x@127.0.0.1:1/db",
		"postgres://u:x/pg-s3cret@127.0.0.1:1/db",
		"postgres://u:pg-s3cret#x@127.0.0.1:1/db",
		"postgres:/u:pg-s3cret@127.0.0.1:1/db?connect_timeout=1",
		"redis:/u:rd-s3cret@127.0.0.1:1/0",
		"redis://u:rd-s3cret/x@127.0.0.1:1/0",
		"etcd://u:et-s3cret/x@127.0.0.1:1",
		"cassandra://u:cs-s3cret/x@127.0.0.1:1/ks",
		`host=127.0.0.1 port=1 password=pg-s3cret\ x`,
		`"host=127.0.0.1 port=1 password=pg-s3cret"`,
	} {
		s, err := store.Open(ctx, raw)
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", raw)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "s3cret") || strings.Contains(msg, "k3y") {
			t.Errorf("Open(%q): %q shows a secret", raw, msg)
		}
	}
}

// A nil option chooses nothing: Open does not panic on one.
func TestOpenNilOption(t *testing.T) {
	s, err := store.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "leases.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}
