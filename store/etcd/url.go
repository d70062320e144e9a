package etcd

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

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

// ParseURL turns a store URL into a Config, without connecting (it reads
// the certificate files the URL names):
//
//	etcd://[user:password@]host:port[,host:port...][?option=value...]
//
// Every endpoint needs a port, 1 to 65535. Options: tls=true (TLS with the
// system's CAs), ca=FILE (PEM CAs; implies TLS), cert=FILE and key=FILE
// (client certificate; imply TLS), username=NAME and password=SECRET
// (instead of the user info), dial_timeout=DURATION (default 5s),
// prefix=KEYPREFIX, allow_unsafe_server=true (Config.AllowUnsafeServer:
// accept etcd releases with known lease-safety bugs). Any other option is an
// error. The error describes a
// malformed URL and never contains the password.
func ParseURL(raw string) (Config, error) {
	if err := driver.CheckUserinfo(raw); err != nil {
		return Config{}, fmt.Errorf("etcd store: bad URL: %w", err)
	}
	rest, ok := strings.CutPrefix(raw, "etcd://")
	if !ok {
		return Config{}, errors.New("etcd store: URL must start with etcd://")
	}
	hosts, query, _ := strings.Cut(rest, "?")
	if i := strings.IndexAny(hosts, "/#"); i >= 0 {
		if strings.Trim(hosts[i:], "/") != "" {
			return Config{}, fmt.Errorf("etcd store: unexpected path %q in URL (the key prefix is the prefix option)", hosts[i:])
		}
		hosts = hosts[:i]
	}
	var cfg Config
	if at := strings.LastIndex(hosts, "@"); at >= 0 {
		ui, err := url.Parse("x://" + hosts[:at+1] + "h")
		if err != nil || ui.User == nil {
			return Config{}, errors.New("etcd store: bad user info in URL")
		}
		cfg.Client.Username = ui.User.Username()
		cfg.Client.Password, _ = ui.User.Password()
		hosts = hosts[at+1:]
	}
	for _, h := range strings.Split(hosts, ",") {
		if h == "" {
			continue
		}
		hu, err := url.Parse("x://" + h)
		if err != nil || hu.Hostname() == "" || hu.Port() == "" || hu.Host != h {
			return Config{}, fmt.Errorf("etcd store: bad endpoint %q: want host:port", h)
		}
		if _, err := driver.ParsePort(hu.Port()); err != nil {
			return Config{}, fmt.Errorf("etcd store: endpoint %q: %w", h, err)
		}
		cfg.Client.Endpoints = append(cfg.Client.Endpoints, h)
	}
	if len(cfg.Client.Endpoints) == 0 {
		return Config{}, errors.New("etcd store: no endpoints in URL; write etcd://host:2379[,host:2379...]")
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return Config{}, fmt.Errorf("etcd store: bad URL query: %w", err)
	}
	var useTLS bool
	var ca, cert, key string
	for k, vs := range q {
		v := vs[len(vs)-1]
		switch k {
		case "tls":
			if useTLS, err = strconv.ParseBool(v); err != nil {
				return Config{}, fmt.Errorf("etcd store: tls=%q is not a boolean", v)
			}
		case "ca":
			ca = v
		case "cert":
			cert = v
		case "key":
			key = v
		case "username":
			cfg.Client.Username = v
		case "password":
			cfg.Client.Password = v
		case "dial_timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return Config{}, fmt.Errorf("etcd store: dial_timeout=%q is not a positive duration such as 5s", v)
			}
			cfg.Client.DialTimeout = d
		case "prefix":
			cfg.Prefix = v
		case "allow_unsafe_server":
			if cfg.AllowUnsafeServer, err = strconv.ParseBool(v); err != nil {
				return Config{}, fmt.Errorf("etcd store: allow_unsafe_server=%q is not a boolean", v)
			}
		default:
			return Config{}, fmt.Errorf("etcd store: unknown URL option %q (known: tls, ca, cert, key, username, password, dial_timeout, prefix, allow_unsafe_server)", k)
		}
	}
	if useTLS || ca != "" || cert != "" || key != "" {
		if cfg.Client.TLS, err = driver.LoadTLS(ca, cert, key); err != nil {
			return Config{}, fmt.Errorf("etcd store: %w", err)
		}
	}
	return cfg, nil
}

// OpenURL opens a Store from an etcd:// URL (see ParseURL and Open).
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}
