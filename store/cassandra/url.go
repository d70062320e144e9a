package cassandra

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

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

// ErrBadURL is wrapped (together with ErrBadConfig) by every error that
// ParseURL returns: the URL is malformed or names something that cannot
// work. The message says what is wrong and never contains the password.
var ErrBadURL = errors.New("cassandra store: bad URL")

// URLForm is the store URL's form, for help texts and registries.
const URLForm = "cassandra://[user[:password]@]host1[,host2...][:port]/[keyspace][?table=&mode=native|jaeger&serial=&consistency=&local_dc=&timeout=&connect_timeout=&tls=&ca=&cert=&key=&verify_host=&replication=]"

// URLParams lists the query parameters of a store URL, for help texts.
var URLParams = []string{
	"table", "mode", "serial", "consistency", "local_dc", "timeout", "connect_timeout",
	"tls", "ca", "cert", "key", "verify_host", "replication",
}

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
//	tls=true|false          use TLS (implied by ca, cert and key)
//	ca=FILE                 PEM certificate authorities of the nodes' certificates
//	cert=FILE&key=FILE      PEM client certificate and key
//	verify_host=true|false  check that a node's certificate names the host (default true;
//	                        false still checks the certificate chain)
//	replication=N           for Init: SimpleStrategy with N replicas (default 1)
//	replication=DC:N[,DC:N] for Init: NetworkTopologyStrategy with N replicas in each DC
//
// Errors wrap ErrBadURL and ErrBadConfig and say what is wrong. ParseURL
// does no I/O.
func ParseURL(raw string) (Config, error) {
	var c Config
	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: %w: %s", ErrBadURL, ErrBadConfig, fmt.Sprintf(format, args...))
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || !strings.EqualFold(scheme, "cassandra") {
		return bad("want cassandra://[user:password@]host1[,host2][:port]/keyspace[?params]")
	}
	if err := driver.CheckUserinfo(raw); err != nil {
		return bad("%v", err)
	}
	authority, pathQuery := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority, pathQuery = rest[:i], rest[i:]
	}
	if strings.Contains(pathQuery, "#") {
		return bad("a fragment ('#') is not allowed")
	}
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo := authority[:i]
		authority = authority[i+1:]
		user, pass, hasPass := strings.Cut(userinfo, ":")
		var err error
		if c.Username, err = url.PathUnescape(user); err != nil || c.Username == "" {
			return bad("the user name is empty or badly percent-encoded")
		}
		if hasPass {
			if c.Password, err = url.PathUnescape(pass); err != nil {
				return bad("the password is badly percent-encoded")
			}
		}
	}
	hosts, port, err := splitHosts(authority)
	if err != nil {
		return bad("%v", err)
	}
	c.Hosts, c.Port = hosts, port

	path, query, _ := strings.Cut(pathQuery, "?")
	ks := strings.TrimPrefix(path, "/")
	if strings.Contains(ks, "/") {
		return bad("the path must be a single keyspace name, got %q", path)
	}
	if ks != "" {
		if !identRE.MatchString(ks) {
			return bad("keyspace %q: want a letter then up to 47 letters, digits or '_'", ks)
		}
		c.Keyspace = ks
	}
	params, err := url.ParseQuery(query)
	if err != nil {
		return bad("query: %v", err)
	}
	verifyHost := true
	tlsSet := ""
	for name, vals := range params {
		if len(vals) != 1 {
			return bad("parameter %s given %d times", name, len(vals))
		}
		v := vals[0]
		switch name {
		case "table":
			if !identRE.MatchString(v) {
				return bad("table %q: want a letter then up to 47 letters, digits or '_'", v)
			}
			c.Table = v
		case "mode":
			switch Mode(strings.ToLower(v)) {
			case ModeNative, ModeJaeger:
				c.Mode = Mode(strings.ToLower(v))
			default:
				return bad("mode %q: want native or jaeger", v)
			}
		case "serial":
			switch strings.ToUpper(v) {
			case "SERIAL":
				c.SerialConsistency = gocql.Serial
			case "LOCAL_SERIAL":
				c.SerialConsistency = gocql.LocalSerial
			default:
				return bad("serial %q: want SERIAL or LOCAL_SERIAL", v)
			}
		case "consistency":
			switch strings.ToUpper(v) {
			case "QUORUM":
				c.CommitConsistency = gocql.Quorum
			case "LOCAL_QUORUM":
				c.CommitConsistency = gocql.LocalQuorum
			default:
				return bad("consistency %q: want QUORUM or LOCAL_QUORUM", v)
			}
		case "local_dc":
			if !dcRE.MatchString(v) {
				return bad("local_dc %q: want letters, digits, '_', '.' or '-'", v)
			}
			c.LocalDC = v
		case "timeout", "connect_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 || d > MaxTimeout {
				return bad("%s %q: want a duration such as 5s, at most %v", name, v, MaxTimeout)
			}
			if name == "timeout" {
				c.Timeout = d
			} else {
				c.ConnectTimeout = d
			}
		case "tls", "verify_host":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return bad("%s %q: want true or false", name, v)
			}
			if name == "tls" {
				c.TLS = b
				tlsSet = v
			} else {
				verifyHost = b
			}
		case "ca", "cert", "key":
			if v == "" {
				return bad("%s: empty file name", name)
			}
			switch name {
			case "ca":
				c.CAFile = v
			case "cert":
				c.CertFile = v
			default:
				c.KeyFile = v
			}
		case "replication":
			r, err := parseReplication(v)
			if err != nil {
				return bad("replication %q: %v", v, err)
			}
			c.Replication = r
		default:
			return bad("unknown parameter %q (known: %s)", name, strings.Join(URLParams, ", "))
		}
	}
	if (c.CAFile != "" || c.CertFile != "" || c.KeyFile != "") && tlsSet != "" && !c.TLS {
		return bad("ca, cert and key need TLS, but tls=%s", tlsSet)
	}
	if !verifyHost {
		if !c.TLS && c.CAFile == "" && c.CertFile == "" && c.KeyFile == "" {
			return bad("verify_host is a TLS setting; add tls=true")
		}
		c.SkipHostVerification = true
	}
	if _, err := c.resolve(); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrBadURL, err)
	}
	return c, nil
}

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
		return Config{}, fmt.Errorf("%w: %w", ErrBadURL, err)
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
