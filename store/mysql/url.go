package mysql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
)

func init() {
	store.Register(store.Driver[Config, *Store]{
		Schemes: []string{"mysql", "mariadb"},
		Usage: "mysql://[user:password@]host[:port]/database[?param=value&...]  a MySQL or MariaDB database, or a Galera node " +
			"(also mariadb://; parameters: table, poll_interval, max_conns, ca, cert, key, wsrep_sync_wait and go-sql-driver's such as " +
			"tls, timeout, readTimeout, writeTimeout; run tenure init once)",
		Parse:    ParseURL,
		Open:     Open,
		Init:     Init,
		CheckTTL: Config.CheckTTL,
	})
}

// driverParams are the go-sql-driver DSN parameters that ParseURL passes
// on. The others that go-sql-driver knows are refused: clientFoundRows,
// interpolateParams and multiStatements change how the store reads its
// answers, charset and collation how its names are sent, and allowAllFiles
// opens LOAD DATA LOCAL INFILE, which the store never uses.
var driverParams = map[string]bool{
	"allowCleartextPasswords": true, "allowFallbackToPlaintext": true, "allowNativePasswords": true,
	"allowOldPasswords": true, "checkConnLiveness": true, "columnsWithAlias": true, "compress": true,
	"connectionAttributes": true, "loc": true, "maxAllowedPacket": true, "parseTime": true,
	"readTimeout": true, "rejectReadOnly": true, "serverPubKey": true, "timeTruncate": true,
	"timeout": true, "tls": true, "writeTimeout": true,
}

// sessionParams are the server variables a URL may set on every
// connection (go-sql-driver sends SET for parameters it does not know).
var sessionParams = map[string]bool{"wsrep_sync_wait": true}

// URLForm is the form of a mysql:// URL, for messages.
const URLForm = "mysql://[user[:password]@]host[:port]/database[?table=&poll_interval=&max_conns=&ca=&cert=&key=&tls=&timeout=&wsrep_sync_wait=...]"

// ParseURL turns a mysql:// or mariadb:// URL into a Config, without
// connecting (it reads the certificate files the URL names):
//
//	mysql://[user[:password]@]host[:port]/database[?param=value&...]
//
// The port must be 1 to 65535 (default 3306); one host only (a Galera
// cluster is reached through one node, or a proxy in front of them). The
// user information is percent-decoded. Parameters:
//
//	table=NAME          the leases table, optionally database.table (default tenure_leases)
//	poll_interval=D     how often waiters look for a release (default 50ms; "off": never, they back off)
//	max_conns=N         the connection pool's size (default 4, or the number of CPUs)
//	ca=FILE             PEM certificate authorities of the server's certificate (implies TLS)
//	cert=FILE, key=FILE a client certificate (implies TLS)
//	wsrep_sync_wait=N   Galera: the session's wsrep_sync_wait (causal reads; see docs/store-mysql.md)
//
// and go-sql-driver's own: tls (true, false, skip-verify, preferred),
// timeout (the connect timeout, default 5s), readTimeout, writeTimeout,
// allowCleartextPasswords, allowNativePasswords, allowOldPasswords,
// allowFallbackToPlaintext, checkConnLiveness, compress,
// connectionAttributes, maxAllowedPacket, rejectReadOnly, serverPubKey,
// and the harmless columnsWithAlias, loc, parseTime and timeTruncate. Any
// other parameter is an error (go-sql-driver would send it to the server as
// a SET), and so are clientFoundRows, interpolateParams, multiStatements,
// charset, collation and allowAllFiles, which the store sets or never uses.
// The error never contains the password.
func ParseURL(raw string) (Config, error) {
	if !strings.Contains(raw, "://") {
		return Config{}, errors.New("mysql store: bad URL: want mysql:// or mariadb://")
	}
	if err := driver.CheckUserinfo(raw); err != nil {
		return Config{}, fmt.Errorf("mysql store: bad URL: %w", err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password included
		}
		return Config{}, fmt.Errorf("mysql store: bad URL: %w", err)
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "mysql" && scheme != "mariadb" {
		return Config{}, fmt.Errorf("mysql store: URL scheme %q, want mysql:// or mariadb://", u.Scheme)
	}
	if u.Opaque != "" || u.Fragment != "" {
		return Config{}, fmt.Errorf("mysql store: bad URL: want %s", URLForm)
	}
	host := u.Hostname()
	switch {
	case host == "":
		return Config{}, fmt.Errorf("mysql store: bad URL: no host (want %s)", URLForm)
	case strings.Contains(u.Host, ","):
		return Config{}, errors.New("mysql store: bad URL: one host only (go-sql-driver connects to one address; put a proxy in front of a cluster, or name one Galera node)")
	}
	port := "3306"
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		if _, err := driver.ParsePort(p); err != nil {
			return Config{}, fmt.Errorf("mysql store: %w", err)
		}
		port = p
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return Config{}, fmt.Errorf("mysql store: bad URL: name one database as the path (want %s)", URLForm)
	}
	mc := gomysql.NewConfig()
	mc.Logger = quietLogger
	mc.Net = "tcp"
	mc.Addr = net.JoinHostPort(host, port)
	mc.DBName = db
	if u.User != nil {
		mc.User = u.User.Username()
		mc.Passwd, _ = u.User.Password()
	}
	cfg := Config{MySQL: mc}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, fmt.Errorf("mysql store: bad URL query: %w", err)
	}
	var unknown, refused []string
	driverQuery := url.Values{}
	var ca, cert, key string
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch {
		case k == "table":
			cfg.Table = v
		case k == "poll_interval":
			if v == "off" {
				cfg.PollInterval = -1
				break
			}
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return Config{}, fmt.Errorf("mysql store: poll_interval=%q: want a positive duration such as 50ms, or off", v)
			}
			cfg.PollInterval = d
		case k == "max_conns":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 10000 {
				return Config{}, fmt.Errorf("mysql store: max_conns=%q: want a number from 1 to 10000", v)
			}
			cfg.MaxConns = n
		case k == "ca":
			ca = v
		case k == "cert":
			cert = v
		case k == "key":
			key = v
		case driverParams[k]:
			driverQuery.Set(k, v)
		case sessionParams[k]:
			if v == "" || strings.Trim(v, "0123456789") != "" {
				return Config{}, fmt.Errorf("mysql store: %s=%q: want a number", k, v)
			}
			mc.Params = map[string]string{k: v}
		case k == "clientFoundRows" || k == "interpolateParams" || k == "multiStatements" ||
			k == "charset" || k == "collation" || k == "allowAllFiles":
			refused = append(refused, k)
		default:
			unknown = append(unknown, k)
		}
	}
	if len(refused) > 0 {
		sort.Strings(refused)
		return Config{}, fmt.Errorf("mysql store: parameter %s: the store sets it itself (or never uses it)", strings.Join(refused, ", "))
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Config{}, fmt.Errorf("mysql store: unknown parameter %s (see %s)", strings.Join(unknown, ", "), URLForm)
	}
	if len(driverQuery) > 0 {
		// go-sql-driver parses its own parameters: through a DSN without
		// user information, so that nothing of the password is parsed.
		pc, err := gomysql.ParseDSN("/?" + driverQuery.Encode())
		if err != nil {
			return Config{}, fmt.Errorf("mysql store: bad URL: %w", err)
		}
		applyDriverParams(mc, pc, driverQuery)
	}
	if ca != "" || cert != "" || key != "" {
		tc, err := driver.LoadTLS(ca, cert, key)
		if err != nil {
			return Config{}, fmt.Errorf("mysql store: %w", err)
		}
		if driverQuery.Get("tls") == "skip-verify" {
			tc.InsecureSkipVerify = true
		} else {
			tc.ServerName = host
		}
		mc.TLS = tc
	}
	if _, err := cfg.check(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// applyDriverParams copies the fields that go-sql-driver's parameters set
// in pc (parsed from q alone) to mc.
func applyDriverParams(mc, pc *gomysql.Config, q url.Values) {
	for k := range q {
		switch k {
		case "allowCleartextPasswords":
			mc.AllowCleartextPasswords = pc.AllowCleartextPasswords
		case "allowFallbackToPlaintext":
			mc.AllowFallbackToPlaintext = pc.AllowFallbackToPlaintext
		case "allowNativePasswords":
			mc.AllowNativePasswords = pc.AllowNativePasswords
		case "allowOldPasswords":
			mc.AllowOldPasswords = pc.AllowOldPasswords
		case "checkConnLiveness":
			mc.CheckConnLiveness = pc.CheckConnLiveness
		case "columnsWithAlias":
			mc.ColumnsWithAlias = pc.ColumnsWithAlias
		case "connectionAttributes":
			mc.ConnectionAttributes = pc.ConnectionAttributes
		case "loc":
			mc.Loc = pc.Loc
		case "maxAllowedPacket":
			mc.MaxAllowedPacket = pc.MaxAllowedPacket
		case "parseTime":
			mc.ParseTime = pc.ParseTime
		case "readTimeout":
			mc.ReadTimeout = pc.ReadTimeout
		case "rejectReadOnly":
			mc.RejectReadOnly = pc.RejectReadOnly
		case "serverPubKey":
			mc.ServerPubKey = pc.ServerPubKey
		case "timeout":
			mc.Timeout = pc.Timeout
		case "tls":
			// go-sql-driver builds the TLS configuration from the name
			// when it opens a connector, with the server's host name.
			mc.TLSConfig, mc.TLS = pc.TLSConfig, nil
		case "writeTimeout":
			mc.WriteTimeout = pc.WriteTimeout
		}
	}
	// compress and timeTruncate are options without exported fields:
	// go-sql-driver applies them from the DSN only.
	var opts []gomysql.Option
	if q.Has("compress") {
		opts = append(opts, gomysql.EnableCompression(q.Get("compress") == "true" || q.Get("compress") == "1"))
	}
	if q.Has("timeTruncate") {
		if d, err := time.ParseDuration(q.Get("timeTruncate")); err == nil {
			opts = append(opts, gomysql.TimeTruncate(d))
		}
	}
	_ = mc.Apply(opts...)
}

// OpenURL opens a Store from a mysql:// URL (see ParseURL and Open). It
// does not create the schema.
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}
