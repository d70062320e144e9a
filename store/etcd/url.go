package etcd

import (
	"context"
	"strings"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
)

func init() {
	store.Register(store.Driver[Config, *Store]{
		Schemes: []string{"etcd"},
		Usage: "etcd://[user:password@]host1:2379[,host2:2379][?param=value&...]  an etcd cluster " +
			"(parameters: prefix, dial_timeout, tls, ca, cert, key, username, password, allow_unsafe_server)",
		Parse:    ParseURL,
		Open:     Open,
		CheckTTL: Config.CheckTTL,
	})
}

// urlSpec describes etcd:// URLs, for messages.
var urlSpec = driver.URLSpec{Store: "etcd", Schemes: []string{"etcd"},
	Form: "etcd://[user:password@]host:port[,host:port...][?param=value&...]"}

// ParseURL turns a store URL into a Config, without connecting (it reads
// the certificate files the URL names):
//
//	etcd://[user:password@]host:port[,host:port...][?param=value...]
//
// Every endpoint needs a port, 1 to 65535. Parameters: tls=true|false (TLS
// with the system's CAs), ca=FILE (PEM CAs), cert=FILE and key=FILE (a
// client certificate), username=NAME and password=SECRET (instead of the
// user information), dial_timeout=DURATION (default 5s), prefix=KEYPREFIX,
// allow_unsafe_server=true (Config.AllowUnsafeServer: accept etcd releases
// with known lease-safety bugs). TLS is on with tls=true or a file named;
// tls=false with a file named is refused (driver.DecideTLS). Any other
// parameter is an error, and so is one given twice. Errors wrap ErrBadURL
// (driver.ErrBadURL) and never contain the password.
func ParseURL(raw string) (Config, error) {
	u, err := urlSpec.Split(raw)
	if err != nil {
		return Config{}, err
	}
	if strings.Trim(u.RawPath, "/") != "" {
		return Config{}, urlSpec.Errorf("unexpected path %q (the key prefix is the prefix parameter)", u.RawPath)
	}
	var cfg Config
	if cfg.Client.Endpoints, err = driver.HostPorts(u.Hosts, ""); err != nil {
		return Config{}, urlSpec.Wrap(err)
	}
	q := u.Query
	cfg.Client.Username, cfg.Client.Password = u.User, u.Password
	if v, ok := q.Lookup("username"); ok {
		cfg.Client.Username = v
	}
	if v, ok := q.Lookup("password"); ok {
		cfg.Client.Password = v
	}
	cfg.Client.DialTimeout = q.Duration("dial_timeout", 0)
	cfg.Prefix = q.String("prefix")
	cfg.AllowUnsafeServer = q.Bool("allow_unsafe_server")
	useTLS, files := q.TLS(q.TLSParam())
	if err := q.Err(); err != nil {
		return Config{}, urlSpec.Wrap(err)
	}
	if useTLS {
		if cfg.Client.TLS, err = files.Load(); err != nil {
			return Config{}, urlSpec.Wrap(err)
		}
	}
	return cfg, nil
}

// OpenURL opens a Store from an etcd:// URL (see ParseURL and Open).
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}
