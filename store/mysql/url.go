package mysql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
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
// on. The others that go-sql-driver knows are refused (ownParams).
var driverParams = []string{
	"tls", "timeout", "readTimeout", "writeTimeout",
	"allowCleartextPasswords", "allowFallbackToPlaintext", "allowNativePasswords", "allowOldPasswords",
	"checkConnLiveness", "columnsWithAlias", "compress", "connectionAttributes", "loc", "maxAllowedPacket",
	"parseTime", "rejectReadOnly", "serverPubKey", "timeTruncate",
}

// ownParams are the go-sql-driver parameters that a URL may not set:
// clientFoundRows, interpolateParams and multiStatements change how the
// store reads its answers, charset and collation how its names are sent,
// and allowAllFiles opens LOAD DATA LOCAL INFILE, which the store never
// uses.
var ownParams = []string{"allowAllFiles", "charset", "clientFoundRows", "collation", "interpolateParams", "multiStatements"}

// URLForm is the form of a mysql:// URL, for messages.
const URLForm = "mysql://[user[:password]@]host[:port]/database[?table=&poll_interval=&max_conns=&ca=&cert=&key=&tls=&timeout=&wsrep_sync_wait=...]"

// urlSpec describes mysql:// URLs, for messages.
var urlSpec = driver.URLSpec{Store: "mysql", Schemes: []string{"mysql", "mariadb"}, Form: URLForm}

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
// a SET), and so is one given twice, and so are clientFoundRows,
// interpolateParams, multiStatements, charset, collation and allowAllFiles,
// which the store sets or never uses. tls=false with ca, cert or key is
// refused (driver.DecideTLS). Errors wrap ErrBadURL (driver.ErrBadURL) and
// never contain the password.
func ParseURL(raw string) (Config, error) {
	u, err := urlSpec.Split(raw)
	if err != nil {
		return Config{}, err
	}
	mc, err := connConfig(u)
	if err != nil {
		return Config{}, urlSpec.Wrap(err)
	}
	q := u.Query
	cfg := Config{MySQL: mc, Table: q.String("table"), MaxConns: q.Int("max_conns", 1, 10000), PollInterval: pollInterval(q)}
	if cfg.Table != "" && !identRE.MatchString(cfg.Table) {
		q.Invalid("table", "letters, digits and underscores (at most 57), optionally database.table")
	}
	if v, ok := q.Lookup("wsrep_sync_wait"); ok {
		if v == "" || strings.Trim(v, "0123456789") != "" {
			q.Invalid("wsrep_sync_wait", "a number")
		}
		mc.Params = map[string]string{"wsrep_sync_wait": v}
	}
	for _, k := range ownParams {
		if q.Has(k) {
			return Config{}, urlSpec.Errorf("parameter %s: the store sets it itself (or never uses it)", k)
		}
	}
	driverQuery := url.Values{}
	for _, k := range driverParams {
		if v, ok := q.Lookup(k); ok {
			driverQuery.Set(k, v)
		}
	}
	_, files := q.TLS(tlsSaid(driverQuery))
	if err := q.Err(); err != nil {
		return Config{}, urlSpec.Wrap(err)
	}
	if err := applyDriverParams(mc, driverQuery); err != nil {
		return Config{}, urlSpec.Wrap(err)
	}
	if files.Any() {
		if err := loadTLS(mc, files, driverQuery.Get("tls")); err != nil {
			return Config{}, urlSpec.Wrap(err)
		}
	}
	return cfg, nil
}

// connConfig returns go-sql-driver's configuration of u's host, database
// and user.
func connConfig(u *driver.URL) (*gomysql.Config, error) {
	if u.Hosts == "" {
		return nil, errors.New("no host")
	}
	hosts, err := driver.HostPorts(u.Hosts, "3306")
	if err != nil {
		return nil, err
	}
	if len(hosts) > 1 {
		return nil, errors.New("one host only (go-sql-driver connects to one address; put a proxy in front of a cluster, or name one Galera node)")
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, errors.New("name one database as the path")
	}
	mc := gomysql.NewConfig()
	mc.Logger = quietLogger
	mc.Net = "tcp"
	mc.Addr = hosts[0]
	mc.DBName = db
	mc.User, mc.Passwd = u.User, u.Password
	return mc, nil
}

// pollInterval reads poll_interval: a positive duration, or "off" (-1).
func pollInterval(q *driver.Query) time.Duration {
	v, ok := q.Lookup("poll_interval")
	d, err := time.ParseDuration(v)
	switch {
	case !ok:
		return 0
	case v == "off":
		return -1
	case err != nil || d <= 0:
		q.Invalid("poll_interval", "a positive duration such as 50ms, or off")
		return 0
	}
	return d
}

// tlsSaid is what go-sql-driver's tls parameter says about TLS: off for
// false (or empty), on for true, skip-verify, preferred or the name of a
// registered configuration.
func tlsSaid(q url.Values) driver.TLSSaid {
	if !q.Has("tls") {
		return driver.TLSSaid{}
	}
	v := q.Get("tls")
	on, err := strconv.ParseBool(v)
	if err != nil {
		on = v != ""
	}
	return driver.TLSSaid{Said: true, On: on, By: "tls=" + v}
}

// loadTLS sets mc's TLS configuration from the files; tls=skip-verify
// keeps its meaning.
func loadTLS(mc *gomysql.Config, files driver.TLSFiles, mode string) error {
	tc, err := files.Load()
	if err != nil {
		return err
	}
	if mode == "skip-verify" {
		tc.InsecureSkipVerify = true
	} else {
		tc.ServerName, _, _ = net.SplitHostPort(mc.Addr)
	}
	mc.TLS = tc
	return nil
}

// applyDriverParams parses q, go-sql-driver's parameters, with
// go-sql-driver (through a DSN without user information, so that nothing of
// the password is parsed) and copies the fields they set to mc. An error
// names the parameter.
func applyDriverParams(mc *gomysql.Config, q url.Values) error {
	if len(q) == 0 {
		return nil
	}
	for k := range q {
		if _, err := gomysql.ParseDSN("/?" + url.Values{k: q[k]}.Encode()); err != nil {
			return fmt.Errorf("%s=%q: %w", k, q.Get(k), err)
		}
	}
	pc, err := gomysql.ParseDSN("/?" + q.Encode())
	if err != nil {
		return err
	}
	copyDriverFields(mc, pc, q)
	return nil
}

// copyDriverFields copies the fields that go-sql-driver's parameters set
// in pc (parsed from q alone) to mc.
func copyDriverFields(mc, pc *gomysql.Config, q url.Values) {
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
