package cassandra

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/driver"
)

// Mode selects the table layout and statements a Store uses.
type Mode string

const (
	// ModeNative is tenure's own table: one row per resource with the owner
	// and the requested TTL (both written with the lease's TTL), a per-write
	// id, and the fencing token (written without TTL, so it survives release
	// and expiry and never goes back). Grants change owner and token in one
	// conditional batch, so a grant and its token are one Paxos round.
	ModeNative Mode = "native"

	// ModeJaeger is the table and the conditional statements of Jaeger's
	// Cassandra lock (jaegertracing/jaeger,
	// internal/storage/distributedlock/cassandra/lock.go): leases (name text
	// PRIMARY KEY, owner text), INSERT ... IF NOT EXISTS USING TTL to grant,
	// UPDATE ... USING TTL ... IF owner = ? to renew, DELETE ... IF owner = ?
	// to release. Jaeger collectors and tenure sharing one table exclude each
	// other.
	//
	// This mode keeps NO fencing token: every Record.Token and Lease.Token is
	// 0, and a holder that was paused or partitioned past its TTL cannot be
	// fenced off by the resource it protects. Use ModeNative unless you must
	// share a lock with Jaeger.
	ModeJaeger Mode = "jaeger"
)

// Defaults.
const (
	// DefaultPort is Cassandra's native protocol port.
	DefaultPort = 9042
	// DefaultKeyspace is the keyspace used when Config.Keyspace is empty.
	DefaultKeyspace = "tenure"
	// DefaultNativeTable is the table of ModeNative when Config.Table is empty.
	DefaultNativeTable = "tenure_leases"
	// DefaultJaegerTable is the table of ModeJaeger when Config.Table is
	// empty: the name Jaeger uses.
	DefaultJaegerTable = "leases"
	// DefaultTimeout bounds every query (and so every store call, together
	// with the caller's context). It is above Cassandra's default server-side
	// timeouts (write_request_timeout 2 s, cas_contention_timeout 1 s,
	// read_request_timeout 5 s), so that a server's own, more informative
	// timeout (for example a CAS write timeout) normally arrives first.
	DefaultTimeout = 10 * time.Second
	// DefaultConnectTimeout bounds each connection attempt (TCP, TLS and the
	// protocol handshake) to one host.
	DefaultConnectTimeout = 5 * time.Second
	// MaxTimeout is the largest Timeout or ConnectTimeout accepted.
	MaxTimeout = 10 * time.Minute
)

// ErrBadConfig is wrapped by every error that Open, Init, Schema and
// ParseURL return for a configuration or URL that cannot work (a bad
// identifier, an unknown mode or consistency, an unreadable TLS file, an
// unknown URL parameter). It is never returned for an unreachable cluster.
var ErrBadConfig = errors.New("cassandra store: bad configuration")

// configError is a configuration that cannot work. It matches ErrBadConfig
// and err, and reads "cassandra store: bad configuration: " and err.
type configError struct{ err error }

// badConfig returns a *configError with the message format, args
// (fmt.Errorf: %w wraps).
func badConfig(format string, args ...any) error {
	return &configError{err: fmt.Errorf(format, args...)}
}

func (e *configError) Error() string   { return ErrBadConfig.Error() + ": " + e.err.Error() }
func (e *configError) Unwrap() []error { return []error{ErrBadConfig, e.err} }

// Config configures a Store. The zero value of every field but Hosts means
// its default.
type Config struct {
	// Hosts are the contact points: host names or IP addresses, optionally
	// with ":port" ("[v6]:port" for IPv6). The driver discovers the other
	// nodes from them. At least one is required.
	Hosts []string

	// Port is the native protocol port for hosts given without one (default
	// 9042).
	Port int

	// Keyspace holds the lease table (default "tenure"). It must match
	// ^[a-zA-Z][a-zA-Z0-9_]{0,47}$ and, like an unquoted CQL name, is case
	// insensitive: it is used in lower case.
	Keyspace string

	// Table is the lease table (default "tenure_leases" in ModeNative,
	// "leases" in ModeJaeger). Same rules as Keyspace.
	Table string

	// Mode is ModeNative (default) or ModeJaeger. ModeJaeger has no fencing
	// tokens: every token is 0 (see ModeJaeger).
	Mode Mode

	// SerialConsistency is the consistency of the Paxos (condition) phase of
	// every conditional write and of Get's linearizable read: gocql.Serial
	// (default) or gocql.LocalSerial. LocalSerial is only safe when every
	// client of a resource runs in the same data center: two clients using
	// LOCAL_SERIAL in different data centers can both be granted the same
	// resource.
	SerialConsistency gocql.Consistency

	// CommitConsistency is the consistency of the commit phase of
	// conditional writes and of List's scan: gocql.Quorum (default) or
	// gocql.LocalQuorum.
	CommitConsistency gocql.Consistency

	// LocalDC, when set, makes the driver prefer the coordinators of this
	// data center (DC-aware round robin, token aware).
	LocalDC string

	// Timeout bounds each query, in addition to the caller's context
	// (default DefaultTimeout, at most MaxTimeout). A conditional write is
	// also bounded by three quarters of the time left before the context's
	// deadline, and by half of it when its coordinator stopped answering, so
	// that a write stuck on a frozen node leaves time to resolve its outcome
	// on another node and to try again. A store call
	// makes at most two conditional writes, each sent once, and at most one
	// resolving read (which the driver may send to a second node when the
	// first does not answer, and which is sent once more when it failed at
	// once on a connection that had just broken), so it returns within
	// about 4·Timeout even when the cluster does not answer; the caller's
	// context usually bounds it much more tightly.
	Timeout time.Duration

	// ConnectTimeout bounds each connection attempt to one host (default
	// DefaultConnectTimeout, at most MaxTimeout). Open gives up after
	// (len(Hosts)+1)·ConnectTimeout at the latest, or when its context ends.
	ConnectTimeout time.Duration

	// Username and Password, when Username is set, authenticate with
	// Cassandra's PasswordAuthenticator.
	Username, Password string

	// TLS enables TLS. It is implied by CAFile, CertFile or KeyFile.
	TLS bool
	// CAFile is a PEM file of certificate authorities that sign the nodes'
	// certificates (default: the system's roots).
	CAFile string
	// CertFile and KeyFile are a PEM client certificate and its key, for
	// clusters that require client certificates. Give both or neither.
	CertFile, KeyFile string
	// SkipHostVerification, when true, still verifies each node's
	// certificate chain against CAFile (or the system roots) but not that
	// the certificate names the host dialled: for clusters whose node
	// certificates do not carry their addresses. Verification is never
	// switched off entirely.
	SkipHostVerification bool

	// Replication is the keyspace's replication, used only by Schema and
	// Init when they create the keyspace (default: SimpleStrategy with
	// replication factor 1, for development; production clusters need 3 or
	// more per data center).
	Replication Replication

	// CreateSchema makes Open create the keyspace and table (Init) when they
	// do not exist. Without it, Open fails with an error that says to run
	// Init (or `tenure init`).
	CreateSchema bool

	// ClusterHook, when set, is called with the driver's cluster
	// configuration after the store filled it in and before the session is
	// created: for driver options that Config does not cover (query and
	// batch observers for metrics or tests, a dialer, an address
	// translator, a fixed protocol version). Do not set a retry or
	// speculative-execution policy that resends conditional writes, and do
	// not shorten timeouts below the server's: the store's guarantees rest on
	// each conditional write being sent once and its outcome resolved. A
	// HostSelectionPolicy set here replaces the store's, which tries nodes
	// that stopped answering last; a StreamObserver set here is called after
	// the store's own. An AddressTranslator must give every node an IP
	// address of its own: gocql v2.1.2 tells hosts apart by IP address alone
	// (HostInfo.Equal, the policies' host lists, marking a host down), so
	// nodes translated to one address with different ports count as one
	// node, and one node's failure can be taken for another's.
	ClusterHook func(*gocql.ClusterConfig)

	// TokenCacheSize bounds the per-store cache of the last fencing token
	// seen per resource, which lets an acquire of a free resource take one
	// lightweight transaction instead of two (default 65536 resources). When
	// it is full, entries are dropped at random; a dropped entry only costs
	// one more round trip on the next acquire of that resource.
	TokenCacheSize int
}

// Replication is a keyspace's replication strategy.
type Replication struct {
	// Factor is SimpleStrategy's replication factor, used when DataCenters
	// is empty (default 1).
	Factor int
	// DataCenters maps data-center names to replication factors, for
	// NetworkTopologyStrategy.
	DataCenters map[string]int
}

// String returns the replication as a CQL map literal.
func (r Replication) String() string {
	if len(r.DataCenters) == 0 {
		f := r.Factor
		if f == 0 {
			f = 1
		}
		return fmt.Sprintf("{'class': 'SimpleStrategy', 'replication_factor': %d}", f)
	}
	dcs := make([]string, 0, len(r.DataCenters))
	for dc := range r.DataCenters {
		dcs = append(dcs, dc)
	}
	sort.Strings(dcs)
	var b strings.Builder
	b.WriteString("{'class': 'NetworkTopologyStrategy'")
	for _, dc := range dcs {
		fmt.Fprintf(&b, ", '%s': %d", dc, r.DataCenters[dc])
	}
	b.WriteString("}")
	return b.String()
}

var (
	identRE = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9_]{0,47}$`)
	dcRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$`)
)

// maxReplicationFactor is a sanity bound on replication factors.
const maxReplicationFactor = 64

func (r Replication) validate() error {
	if len(r.DataCenters) == 0 {
		if r.Factor < 0 || r.Factor > maxReplicationFactor {
			return badConfig("replication factor %d outside 1..%d", r.Factor, maxReplicationFactor)
		}
		return nil
	}
	if r.Factor != 0 {
		return badConfig("give a replication factor or per-data-center factors, not both")
	}
	for dc, f := range r.DataCenters {
		if !dcRE.MatchString(dc) {
			return badConfig("data-center name %q: want letters, digits, '_', '.' or '-' (at most 64)", dc)
		}
		if f < 1 || f > maxReplicationFactor {
			return badConfig("replication factor %d for data center %q outside 1..%d", f, dc, maxReplicationFactor)
		}
	}
	return nil
}

// resolved is a validated Config with its defaults filled in.
type resolved struct {
	Config
	keyspace, table string // lower case, validated
}

// withDefaults validates c and fills in its defaults. Errors wrap
// ErrBadConfig.
func (c Config) resolve() (resolved, error) {
	r := resolved{Config: c}
	if len(c.Hosts) == 0 {
		return r, badConfig("no hosts")
	}
	for _, h := range c.Hosts {
		if err := validateHost(h); err != nil {
			return r, err
		}
	}
	if r.Port == 0 {
		r.Port = DefaultPort
	}
	if r.Port < 1 || r.Port > 65535 {
		return r, badConfig("port %d outside 1..65535", c.Port)
	}
	if r.Mode == "" {
		r.Mode = ModeNative
	}
	switch r.Mode {
	case ModeNative, ModeJaeger:
	default:
		return r, badConfig("mode %q: want %q or %q", c.Mode, ModeNative, ModeJaeger)
	}
	if r.Keyspace == "" {
		r.Keyspace = DefaultKeyspace
	}
	if r.Table == "" {
		r.Table = DefaultNativeTable
		if r.Mode == ModeJaeger {
			r.Table = DefaultJaegerTable
		}
	}
	if !identRE.MatchString(r.Keyspace) {
		return r, badConfig("keyspace %q: want a letter then up to 47 letters, digits or '_'", r.Keyspace)
	}
	if !identRE.MatchString(r.Table) {
		return r, badConfig("table %q: want a letter then up to 47 letters, digits or '_'", r.Table)
	}
	r.keyspace, r.table = strings.ToLower(r.Keyspace), strings.ToLower(r.Table)
	switch r.SerialConsistency {
	case 0:
		r.SerialConsistency = gocql.Serial
	case gocql.Serial, gocql.LocalSerial:
	default:
		return r, badConfig("serial consistency %v: want SERIAL or LOCAL_SERIAL", c.SerialConsistency)
	}
	switch r.CommitConsistency {
	case 0:
		// gocql.Any is 0; ANY is never a valid commit consistency for a
		// lease, so the zero value means the default.
		r.CommitConsistency = gocql.Quorum
	case gocql.Quorum, gocql.LocalQuorum:
	default:
		return r, badConfig("commit consistency %v: want QUORUM or LOCAL_QUORUM", c.CommitConsistency)
	}
	if r.LocalDC != "" && !dcRE.MatchString(r.LocalDC) {
		return r, badConfig("local data center %q: want letters, digits, '_', '.' or '-' (at most 64)", r.LocalDC)
	}
	if r.Timeout == 0 {
		r.Timeout = DefaultTimeout
	}
	if r.ConnectTimeout == 0 {
		r.ConnectTimeout = DefaultConnectTimeout
	}
	if r.Timeout < 0 || r.Timeout > MaxTimeout {
		return r, badConfig("timeout %v outside (0, %v]", c.Timeout, MaxTimeout)
	}
	if r.ConnectTimeout < 0 || r.ConnectTimeout > MaxTimeout {
		return r, badConfig("connect timeout %v outside (0, %v]", c.ConnectTimeout, MaxTimeout)
	}
	if r.Username == "" && r.Password != "" {
		return r, badConfig("a password without a user name")
	}
	if (r.CertFile == "") != (r.KeyFile == "") {
		return r, badConfig("a client certificate needs both a certificate file and a key file")
	}
	if r.CAFile != "" || r.CertFile != "" {
		r.TLS = true
	}
	if r.SkipHostVerification && !r.TLS {
		return r, badConfig("host verification is a TLS setting, but TLS is off")
	}
	if err := r.Replication.validate(); err != nil {
		return r, err
	}
	if r.TokenCacheSize == 0 {
		r.TokenCacheSize = 1 << 16
	}
	if r.TokenCacheSize < 0 {
		return r, badConfig("token cache size %d is negative", c.TokenCacheSize)
	}
	return r, nil
}

var hostRE = regexp.MustCompile(`^[A-Za-z0-9._\-]{1,253}$`)

// validateHost checks a contact point: a name or IPv4 address, "[v6]" or a
// bare IPv6 address, optionally with a port.
func validateHost(h string) error {
	host, port := h, ""
	if strings.HasPrefix(h, "[") {
		end := strings.Index(h, "]")
		if end < 0 {
			return badConfig("host %q: missing ']'", h)
		}
		host, port = h[1:end], strings.TrimPrefix(h[end+1:], ":")
		if h[end+1:] != "" && !strings.HasPrefix(h[end+1:], ":") {
			return badConfig("host %q: unexpected text after ']'", h)
		}
		if net.ParseIP(host) == nil {
			return badConfig("host %q: not an IPv6 address", h)
		}
	} else if net.ParseIP(h) != nil {
		return nil // a bare IPv4 or IPv6 address
	} else if i := strings.LastIndex(h, ":"); i >= 0 {
		host, port = h[:i], h[i+1:]
	}
	if port != "" || strings.HasSuffix(h, ":") {
		if _, err := driver.ParsePort(port); err != nil {
			return badConfig("host %q: %w", h, err)
		}
	}
	if net.ParseIP(host) == nil && !hostRE.MatchString(host) {
		return badConfig("host %q: not a host name or IP address", h)
	}
	return nil
}

// tlsConfig builds the TLS configuration, or nil when TLS is off.
func (r resolved) tlsConfig() (*tls.Config, error) {
	if !r.TLS {
		return nil, nil
	}
	cfg, err := driver.LoadTLS(r.CAFile, r.CertFile, r.KeyFile)
	if err != nil {
		return nil, badConfig("%w", err)
	}
	if r.SkipHostVerification {
		// Verify the chain ourselves, without the host name: Go's
		// InsecureSkipVerify alone would accept any certificate at all.
		roots := cfg.RootCAs
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("cassandra store: the node sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return fmt.Errorf("cassandra store: node certificate: %w", err)
			}
			return nil
		}
	}
	return cfg, nil
}

// cluster builds the driver's cluster configuration, and the tracker of the
// requests in flight that it installs as the driver's stream observer.
func (r resolved) cluster() (*gocql.ClusterConfig, *stallTracker, error) {
	c := gocql.NewCluster(r.Hosts...)
	c.Port = r.Port
	c.Timeout = r.Timeout
	c.WriteTimeout = r.Timeout
	c.ConnectTimeout = r.ConnectTimeout
	c.Consistency = r.CommitConsistency
	c.SerialConsistency = r.SerialConsistency
	c.MaxWaitSchemaAgreement = driverSchemaWait
	// No retries and no speculative executions: a conditional write is sent
	// once, and an unknown outcome is resolved by a linearizable read.
	c.RetryPolicy = nil
	c.DefaultIdempotence = false
	c.ReconnectionPolicy = &gocql.ConstantReconnectionPolicy{MaxRetries: 3, Interval: time.Second}
	c.ReconnectInterval = 10 * time.Second
	// Round robin over coordinators (in the local data center when LocalDC
	// is set), not token aware: with gocql v2.1.2's token-aware policy our
	// three-node test saw every renewal of a resource sent to the same
	// replica, so a replica that stopped answering (paused, not yet marked
	// down) lost the lease although two of three nodes were fine. Round
	// robin spreads successive attempts over the nodes; any node can
	// coordinate a Paxos round, at the cost of one more hop. Nodes that
	// stopped answering (hosts.go) are tried last.
	var inner gocql.HostSelectionPolicy
	if r.LocalDC != "" {
		inner = gocql.DCAwareRoundRobinPolicy(r.LocalDC)
	} else {
		inner = gocql.RoundRobinHostPolicy()
	}
	stalls := newStallTracker(stallAfter)
	c.PoolConfig.HostSelectionPolicy = &stallAwarePolicy{HostSelectionPolicy: inner, t: stalls}
	c.StreamObserver = stalls
	if r.Username != "" {
		c.Authenticator = gocql.PasswordAuthenticator{Username: r.Username, Password: r.Password}
	}
	tc, err := r.tlsConfig()
	if err != nil {
		return nil, nil, err
	}
	if tc != nil {
		c.SslOpts = &gocql.SslOptions{Config: tc, EnableHostVerification: !r.SkipHostVerification}
	}
	if r.ClusterHook != nil {
		r.ClusterHook(c)
		if c.StreamObserver == nil {
			c.StreamObserver = stalls
		} else if c.StreamObserver != gocql.StreamObserver(stalls) {
			c.StreamObserver = chainObservers{stalls, c.StreamObserver}
		}
	}
	return c, stalls, nil
}
