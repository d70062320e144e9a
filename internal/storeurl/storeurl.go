// Package storeurl opens a driver.Store from a URL such as
// "sqlite:/var/lib/tenure/leases.db", for the tenure command and for
// programs that take a store from their configuration.
//
// Each store registers its scheme with Register (the SQLite store is
// registered here; others register from their own package's init function or
// from the program that links them). Open parses the URL, finds the scheme
// and opens the store. Errors wrap ErrBadURL when the URL itself is wrong
// (malformed, no scheme, unknown scheme, a parameter the store does not
// know) and ErrUnavailable when the URL is fine but the store cannot be
// opened or reached, so that callers can tell a usage mistake from an
// outage with errors.Is.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/tenure-go/tenure/driver"
)

var (
	// ErrBadURL means that a store URL is malformed, has no scheme or an
	// unknown one, or has a parameter its store does not accept. The message
	// names the schemes that exist.
	ErrBadURL = errors.New("bad store URL")

	// ErrUnavailable means that the URL is well-formed but the store could not
	// be opened or reached. The store's own error is wrapped too.
	ErrUnavailable = errors.New("store unavailable")
)

// OpenFunc opens a store from the URL as the user wrote it, whose scheme
// (compared without case) is the one it was registered for; stores parse
// their URLs themselves, since not every store URL is one that net/url
// accepts (Cassandra lists hosts as host1,host2:port). It returns an error
// wrapping ErrBadURL (see BadURL) for a URL it cannot use (a missing path, an
// unknown parameter); any other error is reported by Open as ErrUnavailable.
// It must honour ctx.
type OpenFunc func(ctx context.Context, raw string) (driver.Store, error)

// BadURL marks err as a bad-URL error: the result matches both ErrBadURL and
// err with errors.Is. Open functions use it for errors of their own URL
// parsers.
func BadURL(err error) error {
	if err == nil || errors.Is(err, ErrBadURL) {
		return err
	}
	return &badURLError{err: err}
}

type badURLError struct{ err error }

func (e *badURLError) Error() string   { return e.err.Error() }
func (e *badURLError) Unwrap() []error { return []error{ErrBadURL, e.err} }

// Scheme describes a registered scheme.
type Scheme struct {
	// Name is the scheme, lower case, without the colon: "sqlite".
	Name string
	// Doc is a one-line description with the URL's form, such as
	// "sqlite:PATH  a SQLite file shared by the processes of one host".
	Doc string
}

var (
	mu      sync.RWMutex
	schemes = map[string]registered{}
)

type registered struct {
	open OpenFunc
	init InitFunc
	doc  string
}

// InitFunc creates what a store needs before first use (tables, a
// keyspace) if it does not exist yet. It must be idempotent. Its errors are
// classified like OpenFunc's.
type InitFunc func(ctx context.Context, raw string) error

// RegisterInit sets the function that Init runs for scheme, which must be
// registered already. It panics otherwise, or when scheme has one already.
func RegisterInit(scheme string, init InitFunc) {
	mu.Lock()
	defer mu.Unlock()
	r, ok := schemes[scheme]
	switch {
	case !ok:
		panic(fmt.Sprintf("storeurl: RegisterInit of unregistered scheme %q", scheme))
	case r.init != nil:
		panic(fmt.Sprintf("storeurl: init of scheme %q registered twice", scheme))
	case init == nil:
		panic(fmt.Sprintf("storeurl: nil init function for scheme %q", scheme))
	}
	r.init = init
	schemes[scheme] = r
}

var schemeRE = regexp.MustCompile(`^[a-z][a-z0-9+.-]*$`)

// Register makes a store available under scheme (lower case, as in RFC 3986:
// a letter followed by letters, digits, '+', '-' or '.'). doc is a one-line
// description that starts with the URL's form. Register panics when scheme is
// invalid or already registered, or open is nil, like database/sql.Register:
// these are programming errors found at start-up.
func Register(scheme string, open OpenFunc, doc string) {
	if !schemeRE.MatchString(scheme) {
		panic(fmt.Sprintf("storeurl: invalid scheme %q", scheme))
	}
	if open == nil {
		panic(fmt.Sprintf("storeurl: nil open function for scheme %q", scheme))
	}
	mu.Lock()
	defer mu.Unlock()
	if _, dup := schemes[scheme]; dup {
		panic(fmt.Sprintf("storeurl: scheme %q registered twice", scheme))
	}
	schemes[scheme] = registered{open: open, doc: doc}
}

// Schemes returns the registered schemes, sorted by name.
func Schemes() []Scheme {
	mu.RLock()
	defer mu.RUnlock()
	out := make([]Scheme, 0, len(schemes))
	for name, r := range schemes {
		out = append(out, Scheme{Name: name, Doc: r.doc})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// schemeList returns "a:, b:" for error messages.
func schemeList() string {
	var names []string
	for _, s := range Schemes() {
		names = append(names, s.Name+":")
	}
	if len(names) == 0 {
		return "none are registered"
	}
	return "known schemes: " + strings.Join(names, ", ")
}

// Registered reports whether scheme is registered, so that a program can
// register a store that may already have registered itself.
func Registered(scheme string) bool {
	mu.RLock()
	defer mu.RUnlock()
	_, ok := schemes[strings.ToLower(scheme)]
	return ok
}

var schemePrefix = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*):`)

// lookup finds the registration of raw's scheme.
func lookup(raw string) (registered, string, error) {
	if strings.TrimSpace(raw) == "" {
		return registered{}, "", fmt.Errorf("%w: empty URL (%s)", ErrBadURL, schemeList())
	}
	m := schemePrefix.FindStringSubmatch(raw)
	if m == nil {
		hint := ""
		if strings.HasPrefix(raw, "/") || strings.HasPrefix(raw, ".") || strings.HasSuffix(raw, ".db") {
			hint = fmt.Sprintf("; for a SQLite file write sqlite:%s", raw)
		}
		return registered{}, "", fmt.Errorf("%w: %q has no scheme%s (%s)", ErrBadURL, Redact(raw), hint, schemeList())
	}
	scheme := strings.ToLower(m[1])
	mu.RLock()
	r, ok := schemes[scheme]
	mu.RUnlock()
	if !ok {
		return registered{}, "", fmt.Errorf("%w: unknown scheme %q in %q (%s)", ErrBadURL, scheme+":", Redact(raw), schemeList())
	}
	return r, scheme, nil
}

// classify wraps an open or init function's error: bad-URL errors as they
// are, anything else as ErrUnavailable.
func classify(raw string, err error) error {
	if errors.Is(err, ErrBadURL) || errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, Redact(raw), err)
}

// Init prepares the store that raw names for use: it runs the scheme's
// InitFunc (creating tables or a keyspace), or, for a store that needs no
// preparation, opens and closes it, which checks that it can be reached.
// Errors are classified as Open's.
func Init(ctx context.Context, raw string) error {
	r, _, err := lookup(raw)
	if err != nil {
		return err
	}
	if r.init != nil {
		if err := r.init(ctx, raw); err != nil {
			return classify(raw, err)
		}
		return nil
	}
	s, err := Open(ctx, raw)
	if err != nil {
		return err
	}
	return s.Close()
}

// Open opens the store that raw names. A malformed URL, a missing or unknown
// scheme, or a parameter the store does not accept returns an error wrapping
// ErrBadURL that names the known schemes; a store that cannot be opened or
// reached returns an error wrapping ErrUnavailable and the store's error.
// Passwords in the URL are redacted from error messages.
func Open(ctx context.Context, raw string) (driver.Store, error) {
	r, scheme, err := lookup(raw)
	if err != nil {
		return nil, err
	}
	s, err := r.open(ctx, raw)
	switch {
	case err != nil:
		return nil, classify(raw, err)
	case s == nil:
		return nil, fmt.Errorf("%w: %s: the %s store returned no store and no error", ErrUnavailable, Redact(raw), scheme)
	}
	return s, nil
}

var userinfoRE = regexp.MustCompile(`^([^:/?#]+://[^/?#@:]*):[^/?#@]*@`)

// Redact returns raw with the password of its user information, if any,
// replaced by "xxxxx", for messages and logs.
func Redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return userinfoRE.ReplaceAllString(raw, "${1}:xxxxx@")
}

// DefaultSQLitePath returns the default SQLite file of the tenure command:
// $XDG_STATE_HOME/tenure/leases.db, or ~/.local/state/tenure/leases.db when
// XDG_STATE_HOME is unset or not an absolute path (as the XDG Base Directory
// specification asks). It creates the directory, with mode 0700, if it does
// not exist.
func DefaultSQLitePath() (string, error) {
	dir, err := defaultStateDir()
	if err != nil {
		return "", err
	}
	dir = filepath.Join(dir, "tenure")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("%w: create the default store directory: %w", ErrUnavailable, err)
	}
	return filepath.Join(dir, "leases.db"), nil
}

// DefaultSQLitePathDoc describes DefaultSQLitePath for help texts, without
// touching the file system.
const DefaultSQLitePathDoc = "$XDG_STATE_HOME/tenure/leases.db (or ~/.local/state/tenure/leases.db)"

func defaultStateDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("%w: no default store: neither XDG_STATE_HOME nor a home directory is set: %w", ErrUnavailable, err)
	}
	return filepath.Join(home, ".local", "state"), nil
}
