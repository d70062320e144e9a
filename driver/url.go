package driver

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The types below read store URLs by the same rules in every store, without
// I/O: the scheme, the user information, the hosts, the path and the query
// parameters; each parameter given once, of its type, and known to the
// store; TLS decided by one rule (see DecideTLS); every error a *URLError
// that names the store once and never shows a password.

// ErrBadURL means that a store URL cannot work: it is malformed, names a
// port outside 1 to 65535, has a parameter its store does not know, gives
// one twice or with a value the store does not accept, contradicts itself
// (TLS turned off and a CA file named), or names a certificate file that
// cannot be read. Nothing was opened or created. store.ErrBadURL is the
// same value.
var ErrBadURL = errors.New("bad store URL")

// URLError is the error of a store URL that cannot work. It matches
// ErrBadURL and Err with errors.Is and errors.As, and reads
// "bad store URL: etcd store: dial_timeout="x": want a positive duration
// such as 5s": each layer named once.
type URLError struct {
	Store string // the store, as its messages name it: "etcd"
	Err   error  // what is wrong
}

// Error describes the URL's fault.
func (e *URLError) Error() string {
	return ErrBadURL.Error() + ": " + e.Store + " store: " + e.Err.Error()
}

// Unwrap returns ErrBadURL and Err.
func (e *URLError) Unwrap() []error { return []error{ErrBadURL, e.Err} }

// URLSpec describes the URLs of one store, for Split and for its messages.
// Its methods are safe for concurrent use.
type URLSpec struct {
	// Store names the store in messages: "etcd" gives "etcd store: ...".
	Store string
	// Schemes are the schemes the store accepts, lower case ("postgres",
	// "postgresql"); a URL's scheme is compared without case.
	Schemes []string
	// Form is the URL's form, for messages: "etcd://host:port[,host:port...]".
	Form string
}

// Errorf returns a *URLError of the store with the message format and
// args, as fmt.Errorf makes it (%w wraps).
func (s URLSpec) Errorf(format string, args ...any) error {
	return &URLError{Store: s.Store, Err: fmt.Errorf(format, args...)}
}

// Wrap returns err as a *URLError of the store: nil for nil, err itself
// when it is one already.
func (s URLSpec) Wrap(err error) error {
	var ue *URLError
	if err == nil || errors.As(err, &ue) {
		return err
	}
	return &URLError{Store: s.Store, Err: err}
}

// URL is a store URL of the form
// scheme://[user[:password]@]hosts[/path][?query], taken apart by
// URLSpec.Split.
type URL struct {
	Scheme string // one of the spec's schemes, lower case
	// User and Password are the user information, percent-decoded.
	User, Password string
	// HasUser and HasPassword tell whether the URL has user information,
	// and a password in it ("user:@host" has an empty one).
	HasUser, HasPassword bool
	Hosts                string // the authority after the user information, as written
	Path                 string // from its '/', percent-decoded; "" when there is none
	RawPath              string // Path as written
	Query                *Query // the query parameters
}

// Split takes raw apart without I/O. It refuses a URL without "://" or of
// another scheme, an '@', '/', '?' or '#' in the user information that is
// not percent-encoded (CheckUserinfo), a bad percent-encoding, a fragment,
// and a query that ParseQuery refuses. It checks no host: the store does,
// with HostPorts or its own rules.
func (s URLSpec) Split(raw string) (*URL, error) {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || !s.accepts(scheme) {
		// Without "//", "postgres:/u:pw@host" would read as a path holding
		// the user information: a server of the defaults, and a password
		// in the messages.
		return nil, s.Errorf("want %s", s.Form)
	}
	if err := CheckUserinfo(raw); err != nil {
		return nil, s.Wrap(err)
	}
	u := &URL{Scheme: strings.ToLower(scheme)}
	if info, ok := Userinfo(rest); ok {
		if err := u.setUser(info); err != nil {
			return nil, s.Wrap(err)
		}
		rest = rest[len(info)+1:]
	}
	rest, _, hasFragment := strings.Cut(rest, "#")
	if hasFragment {
		return nil, s.Errorf("a fragment ('#') is not allowed")
	}
	rest, query, _ := strings.Cut(rest, "?")
	u.Hosts, u.RawPath = rest, ""
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		u.Hosts, u.RawPath = rest[:i], rest[i:]
	}
	var err error
	if u.Path, err = url.PathUnescape(u.RawPath); err != nil {
		return nil, s.Errorf("the path %q is badly percent-encoded", u.RawPath)
	}
	if u.Query, err = ParseQuery(query); err != nil {
		return nil, s.Wrap(err)
	}
	return u, nil
}

func (s URLSpec) accepts(scheme string) bool {
	for _, x := range s.Schemes {
		if strings.EqualFold(scheme, x) {
			return true
		}
	}
	return false
}

// setUser sets the user information from info ("user[:password]").
func (u *URL) setUser(info string) error {
	user, pass, hasPass := strings.Cut(info, ":")
	var err1, err2 error
	u.User, err1 = url.PathUnescape(user)
	u.Password, err2 = url.PathUnescape(pass)
	if err1 != nil || err2 != nil {
		return errors.New("the user name or password is badly percent-encoded")
	}
	u.HasUser, u.HasPassword = true, hasPass
	return nil
}

// HostPorts splits a list of hosts "host[:port][,host[:port]...]" (IPv6
// addresses in brackets) into "host:port" addresses, with the port def
// where a host has none; with def "", every host needs a port. Ports must
// be 1 to 65535; a host may not be empty or hold any of "[]/?#@ \", nor a
// ':' outside the brackets of an IPv6 address.
func HostPorts(list, def string) ([]string, error) {
	if list == "" {
		return nil, errors.New("no host")
	}
	var out []string
	for _, h := range strings.Split(list, ",") {
		host, port, err := splitHostPort(h, def)
		if err != nil {
			return nil, err
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	return out, nil
}

// splitHostPort splits one host of HostPorts.
func splitHostPort(h, def string) (host, port string, err error) {
	host, port = h, def
	bracketed := strings.HasPrefix(h, "[")
	if i := strings.LastIndexByte(h, ':'); i >= 0 && (!bracketed || strings.HasSuffix(h[:i], "]")) {
		host, port = h[:i], h[i+1:]
	}
	if bracketed {
		if !strings.HasSuffix(host, "]") || net.ParseIP(host[1:len(host)-1]) == nil {
			return "", "", fmt.Errorf("host %q: want [IPv6 address][:port]", h)
		}
		host = host[1 : len(host)-1]
	} else if host == "" || strings.ContainsAny(host, "[]/?#@ \\:") {
		return "", "", fmt.Errorf("host %q: want host[:port]", h)
	}
	if port == "" && def == "" {
		return "", "", fmt.Errorf("host %q: want host:port", h)
	}
	if _, err := ParsePort(port); err != nil {
		return "", "", fmt.Errorf("host %q: %w", h, err)
	}
	return host, port, nil
}

// ParsePort parses a TCP port number: 1 to 65535, digits only.
func ParsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return p, nil
}

// Userinfo returns the user information ("user:password") that starts
// rest, the part of a URL after "scheme://", as a user may have written
// it: up to the last '@' before the host, even where a password holds an
// '@', '/', '?' or '#' that is not percent-encoded (RFC 3986 allows none
// there, but a password pasted into a URL often has one). A '/', '?' or
// '#' ends the authority unless an '@' comes after it with no '=' in
// between: an '@' in a query value ("?client_name=a@b") is not user
// information. ok is false when there is none.
func Userinfo(rest string) (info string, ok bool) {
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndexByte(rest[:end], '@')
	for i := end; i < len(rest) && rest[i] != '='; i++ {
		if rest[i] == '@' {
			at = i
		}
	}
	if at < 0 {
		return "", false
	}
	return rest[:at], true
}

// CheckUserinfo returns an error when the user information of a store URL
// (scheme://user:password@host...) holds an '@', '/', '?' or '#' that is
// not percent-encoded. Parsers split such a URL in different places (Go's
// net/url at the first '/' and the last '@', pgx at the first '@'), so
// part of a password could be taken for a host name, a port or a path,
// used, and shown in an error. The error does not show the URL.
func CheckUserinfo(raw string) error {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil
	}
	if info, ok := Userinfo(rest); ok && strings.ContainsAny(info, "@/?#") {
		return errors.New("the user name or password holds an '@', '/', '?' or '#': percent-encode it (%40, %2F, %3F, %23)")
	}
	return nil
}

// Query holds the query parameters of a store URL and reads each by its
// type. A store asks for every parameter it knows (a parameter it does not
// ask for is unknown), then calls Err. A value of the wrong type or out of
// bounds reads as the zero value and makes Err fail. A Query is not safe
// for concurrent use.
type Query struct {
	vals  map[string]string
	names []string        // as given, for messages in a stable order
	known []string        // asked for, in the order asked
	asked map[string]bool // known, as a set
	err   error           // the first bad value
}

// ParseQuery reads raw, the query of a URL without its '?': parameters
// separated by '&', each "name=value" or "name" (an empty value), names
// and values percent-decoded ('+' is a space). A parameter given twice, a
// bad percent-encoding and an empty name are refused; a ';' is part of a
// value. The error never shows a value.
func ParseQuery(raw string) (*Query, error) {
	q := &Query{vals: map[string]string{}, asked: map[string]bool{}}
	count := map[string]int{}
	for _, pair := range strings.Split(raw, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(k)
		if err != nil || name == "" {
			return nil, fmt.Errorf("parameter %q: bad name", k)
		}
		if q.vals[name], err = url.QueryUnescape(v); err != nil {
			return nil, fmt.Errorf("parameter %q: the value is badly percent-encoded", name)
		}
		if count[name]++; count[name] == 1 {
			q.names = append(q.names, name)
		}
	}
	for _, name := range q.names {
		if n := count[name]; n > 1 {
			return nil, fmt.Errorf("parameter %q given %d times", name, n)
		}
	}
	return q, nil
}

// Known marks names as parameters of the store that something else reads
// (a client library that parses the URL again).
func (q *Query) Known(names ...string) {
	for _, n := range names {
		if !q.asked[n] {
			q.asked[n] = true
			q.known = append(q.known, n)
		}
	}
}

// Has reports whether the parameter is given, without making it known.
func (q *Query) Has(name string) bool {
	_, ok := q.vals[name]
	return ok
}

// Lookup returns the parameter's value, and whether it is given.
func (q *Query) Lookup(name string) (string, bool) {
	q.Known(name)
	v, ok := q.vals[name]
	return v, ok
}

// String returns the parameter's value; "" when it is not given.
func (q *Query) String(name string) string {
	v, _ := q.Lookup(name)
	return v
}

// File returns the parameter's value, a file name; "" when it is not
// given. An empty file name is refused.
func (q *Query) File(name string) string {
	v, ok := q.Lookup(name)
	if ok && v == "" {
		q.fail(fmt.Errorf("%s=\"\": empty file name", name))
	}
	return v
}

// Bool returns the parameter's value, a boolean as strconv.ParseBool reads
// it ("true", "false", "1", "0", ...); false when it is not given.
func (q *Query) Bool(name string) bool {
	v, ok := q.Lookup(name)
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		q.Invalid(name, "true or false")
	}
	return b
}

// Int returns the parameter's value, a whole number from lo to hi (no
// upper bound when hi is math.MaxInt); 0 when it is not given.
func (q *Query) Int(name string, lo, hi int) int {
	v, ok := q.Lookup(name)
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		want := fmt.Sprintf("a whole number from %d to %d", lo, hi)
		if hi == math.MaxInt {
			want = fmt.Sprintf("a whole number, at least %d", lo)
		}
		q.Invalid(name, want)
		return 0
	}
	return n
}

// Duration returns the parameter's value, a positive duration
// (time.ParseDuration) of at most max (no bound when max is 0); 0 when it
// is not given.
func (q *Query) Duration(name string, max time.Duration) time.Duration {
	v, ok := q.Lookup(name)
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 || max > 0 && d > max {
		want := "a positive duration such as 5s"
		if max > 0 {
			want += fmt.Sprintf(", at most %v", max)
		}
		q.Invalid(name, want)
		return 0
	}
	return d
}

// Enum returns the parameter's value, one of values compared without case,
// as values spells it; "" when it is not given.
func (q *Query) Enum(name string, values ...string) string {
	v, ok := q.Lookup(name)
	if !ok {
		return ""
	}
	for _, x := range values {
		if strings.EqualFold(v, x) {
			return x
		}
	}
	want := values[len(values)-1]
	if len(values) > 1 {
		want = strings.Join(values[:len(values)-1], ", ") + " or " + want
	}
	q.Invalid(name, want)
	return ""
}

// Invalid records that the parameter's value is not what the store wants:
// Err returns "name="value": want WANT".
func (q *Query) Invalid(name, want string) {
	q.fail(fmt.Errorf("%s=%q: want %s", name, q.vals[name], want))
}

// Fail records err as the fault of a parameter's value, for Err.
func (q *Query) Fail(err error) { q.fail(err) }

func (q *Query) fail(err error) {
	if q.err == nil {
		q.err = err
	}
}

// Err returns an error for parameters the store did not ask for
// ("unknown parameter "foo" (known: a, b)"), else for the first bad value,
// else nil.
func (q *Query) Err() error {
	var unknown []string
	for _, n := range q.names {
		if !q.asked[n] {
			unknown = append(unknown, strconv.Quote(n))
		}
	}
	if len(unknown) > 0 {
		s := ""
		if len(unknown) > 1 {
			s = "s"
		}
		known := "none"
		if len(q.known) > 0 {
			known = "known: " + strings.Join(q.known, ", ")
		}
		return fmt.Errorf("unknown parameter%s %s (%s)", s, strings.Join(unknown, ", "), known)
	}
	return q.err
}

// TLSFiles are the PEM files a store URL names for TLS.
type TLSFiles struct {
	CA   string // certificate authorities to verify the server with
	Cert string // a client certificate, with Key
	Key  string // the client certificate's key
}

// Any reports whether a file is named.
func (f TLSFiles) Any() bool { return f.CA != "" || f.Cert != "" || f.Key != "" }

// Load reads the files: see LoadTLS.
func (f TLSFiles) Load() (*tls.Config, error) { return LoadTLS(f.CA, f.Cert, f.Key) }

// TLSSaid is what a store URL says about TLS apart from its certificate
// files: nothing, or on or off, and what says it.
type TLSSaid struct {
	Said bool   // the URL says whether to use TLS
	On   bool   // what it says
	By   string // what says it, for messages: "tls=false", "the scheme redis://"
}

// DecideTLS is the TLS rule of every store URL: TLS is on when the URL
// says so (tls=true, a TLS scheme such as rediss://) or names a CA or a
// client certificate, off otherwise. A URL that turns TLS off and names
// such files contradicts itself, and a client certificate without its key
// (or a key without its certificate) is incomplete: both are refused.
func DecideTLS(said TLSSaid, f TLSFiles) (on bool, err error) {
	if (f.Cert == "") != (f.Key == "") {
		return false, errors.New("a client certificate needs both a certificate file and a key file")
	}
	if said.Said && !said.On && f.Any() {
		return false, fmt.Errorf("ca, cert and key need TLS, but %s turns it off", said.By)
	}
	return said.On || f.Any(), nil
}

// TLS reads the parameters ca=FILE, cert=FILE and key=FILE and decides by
// DecideTLS whether to use TLS, given what the rest of the URL says.
func (q *Query) TLS(said TLSSaid) (on bool, files TLSFiles) {
	files = TLSFiles{CA: q.File("ca"), Cert: q.File("cert"), Key: q.File("key")}
	on, err := DecideTLS(said, files)
	if err != nil {
		q.fail(err)
	}
	return on, files
}

// TLSParam reads the parameter tls=BOOL: what it says about TLS.
func (q *Query) TLSParam() TLSSaid {
	v, ok := q.Lookup("tls")
	if !ok {
		return TLSSaid{}
	}
	on := q.Bool("tls")
	return TLSSaid{Said: true, On: on, By: "tls=" + v}
}
