// Package store opens tenure stores from URLs, as database/sql opens
// databases from data source names: one registry of URL schemes, to which
// each store package adds its own when it is imported, and one way to check
// and open a URL.
//
//	import (
//		"github.com/tenure-go/tenure"
//		"github.com/tenure-go/tenure/store"
//		_ "github.com/tenure-go/tenure/store/all" // or only the stores you use
//	)
//
//	s, err := store.Open(ctx, os.Getenv("LEASE_STORE")) // "postgres://...", "sqlite:/var/lib/app/leases.db", ...
//	if err != nil { ... }
//	defer s.Close()
//	locker, err := tenure.New(s)
//
// The schemes of the stores in this module:
//
//	sqlite:PATH                   store/sqlite: a SQLite file shared by the processes of one host
//	cassandra://host1,host2/ks    store/cassandra: a Cassandra or ScyllaDB cluster
//	postgres://, postgresql://    store/postgres: a PostgreSQL database
//	mysql://, mariadb://          store/mysql: a MySQL or MariaDB database (or a Galera node)
//	etcd://host:2379              store/etcd: an etcd cluster
//	redis://, rediss://           store/redis: one Redis server
//	redis+sentinel://, redis+cluster://  store/redis: Redis Sentinel's master, a Redis Cluster
//	memory:                       store/memory: in this process only (tests, examples)
//
// Schemes lists those that are registered, with each URL's form and
// parameters.
//
// # Checked before any I/O
//
// Parse checks a URL completely without connecting or creating anything
// (it reads the certificate files a URL names, nothing else): the scheme,
// the host names and ports (1 to 65535 in every scheme), every query
// parameter (an unknown one, or one given twice, is an error in every
// scheme), and TLS by one rule (driver.DecideTLS). The result's
// CheckTTL tells whether the store can keep a TTL, from the URL alone, so a
// program can refuse a configuration before it touches the store. Open and
// Init parse first, so a bad URL never causes I/O either.
//
// # Errors
//
// Errors of a URL that cannot work wrap ErrBadURL; errors of a store that
// cannot be opened, reached or prepared wrap ErrUnavailable and the store's
// own error. Opened with Inspect, a store that does not exist is also
// ErrNoStore, and a place that exists but is not a tenure store (a
// directory, a file of another kind, another application's table) is also
// ErrNotStore. Test with errors.Is.
//
// Passwords never appear in errors or in String: the password of the user
// information and the values of the parameters that a scheme marks secret
// (password=, sslpassword=) are replaced by "xxxxx" (see Redact).
//
// # Writing a store
//
// A store package registers its schemes in an init function, with one call
// of Register (see Driver, and "Writing a store" in docs/stores.md):
//
//	func init() {
//		store.Register(store.Driver[Config, *Store]{
//			Schemes: []string{"mystore"},
//			Usage:   "mystore://host[:port]  ...",
//			Parse:   ParseURL,
//			Open:    Open,
//		})
//	}
package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/tenure-go/tenure/driver"
)

var (
	// ErrBadURL is driver.ErrBadURL: a store URL cannot work. It is
	// malformed, has no scheme or one that is not registered, names a port
	// outside 1 to 65535, has a parameter its store does not know, gives one
	// twice or with a value the store does not accept, contradicts itself
	// (TLS turned off and a CA file named), or names a certificate file that
	// cannot be read. Nothing was opened or created. The message says what
	// is wrong; for an unknown scheme it names the registered ones.
	ErrBadURL = driver.ErrBadURL

	// ErrUnavailable means that the URL is fine but the store could not be
	// opened, reached or prepared. The store's own error is wrapped too.
	ErrUnavailable = errors.New("store unavailable")

	// ErrNoStore is driver.ErrNoStore: opened with Inspect, the store does
	// not exist (no SQLite file, no leases table, no keyspace), and nothing
	// was created. Such errors match ErrUnavailable too.
	ErrNoStore = driver.ErrNoStore

	// ErrNotStore is driver.ErrNotStore: what the URL names exists but is
	// not a tenure store (a directory, a file that is not a SQLite database,
	// an empty file, another application's table of the same name). Such
	// errors match ErrUnavailable too.
	ErrNotStore = driver.ErrNotStore
)

// Driver is what a store package registers: its URL schemes and the
// functions of its package that parse a URL into its configuration C,
// open a store S from it, and check TTLs against it. Register it once, from
// the package's init function. The functions must be safe for concurrent
// use.
type Driver[C any, S driver.Store] struct {
	// Schemes are the URL schemes the store opens: lower case, a letter
	// followed by letters, digits, '+', '-' or '.', without the colon. The
	// first is its name; the others are aliases ("postgresql").
	Schemes []string

	// Usage is one line for help texts: the URL's form, two spaces, and a
	// description that names the parameters.
	Usage string

	// Secrets are the query parameters whose values are secrets, such as
	// "sslpassword". Redact replaces them, as it does "password" and the
	// password of the user information in every scheme.
	Secrets []string

	// Parse checks raw (whose scheme, compared without case, is one of
	// Schemes) completely and returns the configuration it names, without
	// connecting or creating anything: every error it returns is a bad URL.
	// It must refuse a port outside 1 to 65535, an unknown query parameter
	// and one given twice; driver.URLSpec and driver.Query read a URL by
	// these rules and return *driver.URLError, which names the store.
	Parse func(raw string) (C, error)

	// Open opens the store, bounded by ctx. Its errors are reported as
	// ErrUnavailable.
	Open func(ctx context.Context, cfg C) (S, error)

	// Inspect, when set, changes cfg so that Open creates nothing (no file,
	// no directory, no table, no keyspace), returns an error wrapping
	// driver.ErrNoStore when the store does not exist, and opens a store
	// the user may only read for reading. Leave it nil when Open never
	// creates anything.
	Inspect func(cfg *C)

	// Init, when set, creates what the store needs before first use
	// (tables, a keyspace) when it does not exist, idempotently. Without
	// it, Init opens the store and closes it, which checks that it can be
	// reached.
	Init func(ctx context.Context, cfg C) error

	// CheckTTL, when set, returns an error wrapping driver.ErrInvalidTTL
	// for a TTL that a store opened with cfg cannot keep, without I/O.
	// Without it, every positive TTL is accepted.
	CheckTTL func(cfg C, ttl time.Duration) error
}

// entry is a registered driver, its functions on a *C held as any.
type entry struct {
	schemes  []string
	usage    string
	secrets  []string
	parse    func(raw string) (any, error)
	open     func(ctx context.Context, cfg any, inspect bool) (driver.Store, error)
	init     func(ctx context.Context, cfg any) error // nil: open and close
	checkTTL func(cfg any, ttl time.Duration) error
}

var (
	mu      sync.RWMutex
	schemes = map[string]*entry{}
)

var schemeRE = regexp.MustCompile(`^[a-z][a-z0-9+.-]*$`)

// Register makes a store's URL schemes available to Parse, Open and Init.
// Store packages call it from their init function, so that importing the
// package (store/all imports every store of this module) is all a program
// does. Register panics, as database/sql.Register does, when a scheme is
// invalid or already registered, or Parse or Open is nil: these are
// programming errors found at start-up.
func Register[C any, S driver.Store](d Driver[C, S]) {
	if len(d.Schemes) == 0 || d.Parse == nil || d.Open == nil {
		panic(fmt.Sprintf("store: Register(%v): a driver needs schemes, Parse and Open", d.Schemes))
	}
	e := &entry{
		schemes: d.Schemes,
		usage:   d.Usage,
		secrets: d.Secrets,
		parse: func(raw string) (any, error) {
			c, err := d.Parse(raw)
			if err != nil {
				return nil, err
			}
			return &c, nil
		},
		open: func(ctx context.Context, cfg any, inspect bool) (driver.Store, error) {
			c := *cfg.(*C)
			if inspect && d.Inspect != nil {
				d.Inspect(&c)
			}
			s, err := d.Open(ctx, c)
			if err != nil {
				return nil, err // not a driver.Store holding a nil *S
			}
			return s, nil
		},
		checkTTL: func(cfg any, ttl time.Duration) error {
			if d.CheckTTL == nil {
				return driver.ValidateTTL(ttl)
			}
			return d.CheckTTL(*cfg.(*C), ttl)
		},
	}
	if d.Init != nil {
		e.init = func(ctx context.Context, cfg any) error { return d.Init(ctx, *cfg.(*C)) }
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range d.Schemes {
		if !schemeRE.MatchString(s) {
			panic(fmt.Sprintf("store: invalid scheme %q", s))
		}
		if _, dup := schemes[s]; dup {
			panic(fmt.Sprintf("store: scheme %q registered twice", s))
		}
	}
	for _, s := range d.Schemes {
		schemes[s] = e
	}
}

// Scheme describes a registered store: its URL scheme, the other schemes
// of the same store, and its help line.
type Scheme struct {
	// Name is the scheme, lower case, without the colon: "postgres".
	Name string
	// Aliases are other schemes of the same store: "postgresql".
	Aliases []string
	// Usage is the URL's form, two spaces, and a description.
	Usage string
}

// Schemes returns the registered stores, one per store, sorted by name.
func Schemes() []Scheme {
	mu.RLock()
	defer mu.RUnlock()
	seen := map[*entry]bool{}
	var out []Scheme
	for _, e := range schemes {
		if seen[e] {
			continue
		}
		seen[e] = true
		out = append(out, Scheme{Name: e.schemes[0], Aliases: e.schemes[1:], Usage: e.usage})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// schemeList returns "known schemes: a:, b:" for error messages.
func schemeList() string {
	mu.RLock()
	names := make([]string, 0, len(schemes))
	for name := range schemes {
		names = append(names, name+":")
	}
	mu.RUnlock()
	if len(names) == 0 {
		return "no store is registered; import github.com/tenure-go/tenure/store/all"
	}
	sort.Strings(names)
	return "known schemes: " + strings.Join(names, ", ")
}

var schemePrefix = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*):`)

// lookup finds the driver of raw's scheme.
func lookup(raw string) (*entry, string, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, "", fmt.Errorf("%w: empty URL (%s)", ErrBadURL, schemeList())
	}
	m := schemePrefix.FindStringSubmatch(raw)
	if m == nil {
		hint := ""
		if strings.HasPrefix(raw, "/") || strings.HasPrefix(raw, ".") || strings.HasSuffix(raw, ".db") {
			hint = fmt.Sprintf("; for a SQLite file write sqlite:%s", Redact(raw))
		}
		return nil, "", fmt.Errorf("%w: %q has no scheme%s (%s)", ErrBadURL, Redact(raw), hint, schemeList())
	}
	scheme := strings.ToLower(m[1])
	mu.RLock()
	e := schemes[scheme]
	mu.RUnlock()
	if e == nil {
		return nil, "", fmt.Errorf("%w: unknown scheme %q in %q (%s)", ErrBadURL, scheme+":", Redact(raw), schemeList())
	}
	return e, scheme, nil
}

// URL is a store URL that Parse checked: what it names, ready to open. Its
// methods are safe for concurrent use, except that the configuration
// Config returns must not be changed while Open or Init runs.
type URL struct {
	raw, scheme string
	e           *entry
	cfg         any // *C
}

// Parse checks raw completely, without connecting to anything and without
// creating anything (it reads the certificate files that the URL names),
// and returns it ready to open. Errors wrap ErrBadURL and never show a
// password.
func Parse(raw string) (*URL, error) {
	e, scheme, err := lookup(raw)
	if err != nil {
		return nil, err
	}
	cfg, err := e.parse(raw)
	if err != nil {
		return nil, badURL(scrub(raw, err))
	}
	return &URL{raw: raw, scheme: scheme, e: e, cfg: cfg}, nil
}

// Scheme returns the URL's scheme, lower case: "postgres", "sqlite".
func (u *URL) Scheme() string { return u.scheme }

// String returns the URL with its secrets redacted (see Redact).
func (u *URL) String() string { return Redact(u.raw) }

// Config returns a pointer to the store package's configuration that the
// URL names, such as *postgres.Config or *sqlite.Config. A program may
// change it before Open or Init, for settings a URL cannot carry (a query
// tracer, client hooks, a cluster option):
//
//	if c, ok := u.Config().(*redis.Config); ok {
//		c.Hooks = append(c.Hooks, myHook)
//	}
func (u *URL) Config() any { return u.cfg }

// CheckTTL returns an error wrapping driver.ErrInvalidTTL when the store
// that the URL names cannot keep ttl (below its resolution or minimum, or
// above its maximum), without I/O.
func (u *URL) CheckTTL(ttl time.Duration) error { return u.e.checkTTL(u.cfg, ttl) }

// Option changes how Open opens a store.
type Option func(*options)

type options struct{ inspect bool }

// Inspect opens an existing store only, to read its leases or free them
// (the tenure command's status, list and release): Open creates nothing (no
// file, no directory, no table, no keyspace) and changes nothing but the
// leases it is asked to change. A store that does not exist is an error
// wrapping ErrNoStore; what is there but is not a tenure store is an error
// wrapping ErrNotStore. A SQLite file the user may read but not write is
// opened read-only.
func Inspect() Option { return func(o *options) { o.inspect = true } }

// Open opens the store that the URL names, bounded by ctx. Stores that
// keep their leases in a file create it unless Inspect is given; stores
// with a schema on a server never create it (see Init). Errors wrap
// ErrUnavailable and the store's error, and never show a password.
func (u *URL) Open(ctx context.Context, opts ...Option) (driver.Store, error) {
	var o options
	for _, f := range opts {
		if f != nil { // a nil option chooses nothing
			f(&o)
		}
	}
	s, err := u.e.open(ctx, u.cfg, o.inspect)
	if err != nil {
		return nil, u.unavailable(err)
	}
	return s, nil
}

// Init prepares the store that the URL names for use, bounded by ctx: it
// creates its tables or keyspace (PostgreSQL, Cassandra) or its file
// (SQLite) when they do not exist, and leaves existing leases alone; for a
// store that needs nothing it opens and closes it, which checks that it can
// be reached. Errors are Open's.
func (u *URL) Init(ctx context.Context) error {
	if u.e.init == nil {
		s, err := u.Open(ctx)
		if err != nil {
			return err
		}
		return s.Close()
	}
	if err := u.e.init(ctx, u.cfg); err != nil {
		return u.unavailable(err)
	}
	return nil
}

// unavailable wraps err, the error of an open or init, as ErrUnavailable
// (unless it is a bad URL already), naming the URL without secrets.
func (u *URL) unavailable(err error) error {
	err = scrub(u.raw, err)
	if errors.Is(err, ErrBadURL) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, u, err)
}

// Open parses raw (see Parse) and opens the store it names (see URL.Open).
// A URL that cannot work returns an error wrapping ErrBadURL, before any
// I/O; a store that cannot be opened or reached returns an error wrapping
// ErrUnavailable.
func Open(ctx context.Context, raw string, opts ...Option) (driver.Store, error) {
	u, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	return u.Open(ctx, opts...)
}

// Init parses raw (see Parse) and prepares the store it names for use (see
// URL.Init).
func Init(ctx context.Context, raw string) error {
	u, err := Parse(raw)
	if err != nil {
		return err
	}
	return u.Init(ctx)
}

// badURL marks err as a bad-URL error: the result matches ErrBadURL and
// err with errors.Is.
func badURL(err error) error {
	if errors.Is(err, ErrBadURL) {
		return err
	}
	return &badURLError{err: err}
}

type badURLError struct{ err error }

func (e *badURLError) Error() string   { return ErrBadURL.Error() + ": " + e.err.Error() }
func (e *badURLError) Unwrap() []error { return []error{ErrBadURL, e.err} }
