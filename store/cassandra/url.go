package cassandra

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
)

func init() {
	store.Register(store.Driver[Config, *Store]{
		Schemes: []string{"cassandra"},
		Usage: "cassandra://[user:password@]host1[,host2][:port]/keyspace[?param=value&...]  a Cassandra cluster " +
			"(parameters: " + strings.Join(URLParams, ", ") + "; replication is for tenure init)",
		Parse:    parseChecked,
		Open:     Open,
		Inspect:  func(c *Config) { c.CreateSchema = false },
		Init:     Init,
		CheckTTL: Config.CheckTTL,
	})
}

// ErrBadURL is driver.ErrBadURL (and store.ErrBadURL): every error that
// ParseURL returns matches it, and ErrBadConfig.
var ErrBadURL = driver.ErrBadURL

// URLForm is the store URL's form, for help texts and registries.
const URLForm = "cassandra://[user[:password]@]host1[,host2...][:port]/[keyspace][?table=&mode=native|jaeger&serial=&consistency=&local_dc=&timeout=&connect_timeout=&tls=&ca=&cert=&key=&verify_host=&replication=]"

// URLParams lists the query parameters of a store URL, for help texts.
var URLParams = []string{
	"table", "mode", "serial", "consistency", "local_dc", "timeout", "connect_timeout",
	"tls", "ca", "cert", "key", "verify_host", "replication",
}

// urlSpec describes cassandra:// URLs, for messages.
var urlSpec = driver.URLSpec{Store: "cassandra", Schemes: []string{"cassandra"},
	Form: "cassandra://[user:password@]host1[,host2][:port]/keyspace[?params]"}

// ParseURL parses a store URL:
//
//	cassandra://[user[:password]@]host1[,host2...][:port]/[keyspace][?param=value&...]
//
// Hosts are names or IP addresses (IPv6 in brackets), separated by commas;
// the port after the last host applies to every host (default 9042). The
// path is the keyspace (default "tenure"). User name and password are
// percent-decoded. Parameters:
//
//	table=NAME              lease table (default tenure_leases; leases in jaeger mode)
//	mode=native|jaeger      table layout and statements (default native; jaeger has no fencing tokens)
//	serial=SERIAL|LOCAL_SERIAL       consistency of the Paxos phase and of Get (default SERIAL)
//	consistency=QUORUM|LOCAL_QUORUM  consistency of the commit phase and of List (default QUORUM)
//	local_dc=NAME           prefer coordinators in this data center
//	timeout=DURATION        bound of each query, e.g. 5s (default 10s)
//	connect_timeout=DURATION         bound of each connection attempt (default 5s)
//	tls=true|false          use TLS (implied by ca, cert and key; tls=false with them is refused)
//	ca=FILE                 PEM certificate authorities of the nodes' certificates
//	cert=FILE&key=FILE      PEM client certificate and key
//	verify_host=true|false  check that a node's certificate names the host (default true;
//	                        false still checks the certificate chain)
//	replication=N           for Init: SimpleStrategy with N replicas (default 1)
//	replication=DC:N[,DC:N] for Init: NetworkTopologyStrategy with N replicas in each DC
//
// A parameter given twice is refused, and so is an unknown one. Errors wrap
// ErrBadURL and ErrBadConfig and say what is wrong. ParseURL does no I/O.
func ParseURL(raw string) (Config, error) {
	u, err := urlSpec.Split(raw)
	if err != nil {
		return Config{}, badURL(err)
	}
	c := Config{Username: u.User, Password: u.Password}
	if u.HasUser && u.User == "" {
		return Config{}, badURL(errors.New("the user name is empty"))
	}
	if c.Hosts, c.Port, err = splitHosts(u.Hosts); err != nil {
		return Config{}, badURL(err)
	}
	if c.Keyspace, err = keyspace(u.RawPath); err != nil {
		return Config{}, badURL(err)
	}
	if err := c.setParams(u.Query); err != nil {
		return Config{}, badURL(err)
	}
	if _, err := c.resolve(); err != nil {
		return Config{}, badURL(err)
	}
	return c, nil
}

// keyspace returns the keyspace that path ("/ks", "/" or "") names; "" for
// the default.
func keyspace(path string) (string, error) {
	ks := strings.TrimPrefix(path, "/")
	if strings.Contains(ks, "/") {
		return "", fmt.Errorf("the path must be a single keyspace name, got %q", path)
	}
	if ks != "" && !identRE.MatchString(ks) {
		return "", fmt.Errorf("keyspace %q: want a letter then up to 47 letters, digits or '_'", ks)
	}
	return ks, nil
}

// setParams sets c from the query parameters of its URL.
func (c *Config) setParams(q *driver.Query) error {
	const ident = "a letter then up to 47 letters, digits or '_'"
	if c.Table = q.String("table"); q.Has("table") && !identRE.MatchString(c.Table) {
		q.Invalid("table", ident)
	}
	c.Mode = Mode(q.Enum("mode", string(ModeNative), string(ModeJaeger)))
	c.SerialConsistency = consistencies[q.Enum("serial", "SERIAL", "LOCAL_SERIAL")]
	c.CommitConsistency = consistencies[q.Enum("consistency", "QUORUM", "LOCAL_QUORUM")]
	if c.LocalDC = q.String("local_dc"); q.Has("local_dc") && !dcRE.MatchString(c.LocalDC) {
		q.Invalid("local_dc", "letters, digits, '_', '.' or '-'")
	}
	c.Timeout = q.Duration("timeout", MaxTimeout)
	c.ConnectTimeout = q.Duration("connect_timeout", MaxTimeout)
	said := q.TLSParam()
	on, files := q.TLS(said)
	c.TLS, c.CAFile, c.CertFile, c.KeyFile = said.On, files.CA, files.Cert, files.Key
	if _, ok := q.Lookup("verify_host"); ok && !q.Bool("verify_host") {
		if !on {
			q.Fail(errors.New("verify_host is a TLS setting; add tls=true"))
		}
		c.SkipHostVerification = true
	}
	if v, ok := q.Lookup("replication"); ok {
		r, err := parseReplication(v)
		if err != nil {
			q.Fail(fmt.Errorf("replication=%q: %w", v, detail(err)))
		}
		c.Replication = r
	}
	return q.Err()
}

// consistencies are the consistencies that a URL names.
var consistencies = map[string]gocql.Consistency{
	"SERIAL": gocql.Serial, "LOCAL_SERIAL": gocql.LocalSerial,
	"QUORUM": gocql.Quorum, "LOCAL_QUORUM": gocql.LocalQuorum,
}

// badURL returns err as the error of a URL that cannot work: it matches
// ErrBadURL and ErrBadConfig, and names the store once.
func badURL(err error) error {
	var ue *driver.URLError
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return urlSpec.Wrap(&urlConfigError{detail(err)})
}

// detail returns what err, a *configError, says without the name of the
// store and of ErrBadConfig; other errors as they are.
func detail(err error) error {
	if ce, ok := err.(*configError); ok {
		return ce.err
	}
	return err
}

// urlConfigError is a configuration error inside a *driver.URLError, which
// names the store: it matches ErrBadConfig without saying it.
type urlConfigError struct{ err error }

func (e *urlConfigError) Error() string   { return e.err.Error() }
func (e *urlConfigError) Unwrap() []error { return []error{ErrBadConfig, e.err} }

// parseChecked is ParseURL, then a check that the certificate files the URL
// names can be read: the registry's parse, so that store.Parse finds a bad
// CA file before anything connects (ParseURL itself reads no file, for
// `tenure schema`).
func parseChecked(raw string) (Config, error) {
	c, err := ParseURL(raw)
	if err != nil {
		return c, err
	}
	r, err := c.resolve()
	if err == nil {
		_, err = r.tlsConfig()
	}
	if err != nil {
		return Config{}, badURL(err)
	}
	return c, nil
}

// splitHosts parses "h1,h2:port", "[::1],[::2]:port" or "h1".
func splitHosts(authority string) ([]string, int, error) {
	if authority == "" {
		return nil, 0, errors.New("no host; want cassandra://host1[,host2][:port]/keyspace")
	}
	parts := strings.Split(authority, ",")
	port := 0
	last := parts[len(parts)-1]
	// A port after the last host applies to every host.
	hostPart, portPart, hasPort := last, "", false
	if strings.HasPrefix(last, "[") {
		end := strings.Index(last, "]")
		if end < 0 {
			return nil, 0, fmt.Errorf("host %q: missing ']'", last)
		}
		if rest := last[end+1:]; rest != "" {
			if !strings.HasPrefix(rest, ":") {
				return nil, 0, fmt.Errorf("host %q: unexpected text after ']'", last)
			}
			hostPart, portPart, hasPort = last[:end+1], rest[1:], true
		}
	} else if strings.Count(last, ":") == 1 {
		hostPart, portPart, _ = strings.Cut(last, ":")
		hasPort = true
	}
	if hasPort {
		p, err := driver.ParsePort(portPart)
		if err != nil {
			return nil, 0, err
		}
		port = p
		parts[len(parts)-1] = hostPart
	}
	hosts := make([]string, 0, len(parts))
	for _, h := range parts {
		if h == "" {
			return nil, 0, fmt.Errorf("empty host in %q", authority)
		}
		if strings.HasPrefix(h, "[") {
			if !strings.HasSuffix(h, "]") {
				return nil, 0, fmt.Errorf("host %q: only the last host may carry a port, and it applies to all", h)
			}
			h = h[1 : len(h)-1]
		} else if strings.Contains(h, ":") {
			return nil, 0, fmt.Errorf("host %q: only the last host may carry a port, and it applies to all (IPv6 addresses go in brackets)", h)
		}
		if err := validateHost(h); err != nil {
			return nil, 0, err
		}
		hosts = append(hosts, h)
	}
	return hosts, port, nil
}

// parseReplication parses "N" or "DC:N,DC:N".
func parseReplication(v string) (Replication, error) {
	if n, err := strconv.Atoi(v); err == nil {
		if n < 1 || n > maxReplicationFactor {
			return Replication{}, fmt.Errorf("factor %d outside 1..%d", n, maxReplicationFactor)
		}
		return Replication{Factor: n}, nil
	}
	r := Replication{DataCenters: map[string]int{}}
	for _, part := range strings.Split(v, ",") {
		dc, f, ok := strings.Cut(part, ":")
		n, err := strconv.Atoi(f)
		if !ok || err != nil {
			return Replication{}, errors.New("want N or DC:N[,DC:N...]")
		}
		if _, dup := r.DataCenters[dc]; dup {
			return Replication{}, fmt.Errorf("data center %q given twice", dc)
		}
		r.DataCenters[dc] = n
	}
	return r, r.validate()
}

// OpenURL parses raw with ParseURL and opens the store (see Open). Errors
// wrap ErrBadURL for a bad URL; otherwise they are Open's.
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}
