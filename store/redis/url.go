package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
)

func init() {
	store.Register(store.Driver[Config, *Store]{
		Schemes: []string{"redis", "rediss"},
		Usage: "redis://[user:password@]host[:port][/db][?param=value&...]  a single Redis instance (rediss:// for TLS; " +
			"parameters: prefix, ca, cert, key, allow_eviction and go-redis's such as dial_timeout, read_timeout, pool_size; " +
			"see docs/stores.md for the durability fencing tokens need)",
		Parse:    ParseURL,
		Open:     Open,
		CheckTTL: Config.CheckTTL,
	})
}

// ParseURL turns a store URL into a Config, without connecting (it reads
// the certificate files the URL names):
//
//	redis://[user:password@]host:port[/db][?option=value...]
//	rediss://...      TLS
//
// The port must be 1 to 65535 (default 6379). Options are go-redis's
// (dial_timeout, read_timeout, write_timeout, pool_size, skip_verify, ...)
// plus tenure's own: prefix (the key prefix), ca (a PEM file of CAs to
// verify the server with), cert and key (a client certificate for mutual
// TLS), allow_eviction=true. Any other option is an error. The error
// describes a malformed URL and never contains the password.
func ParseURL(raw string) (Config, error) {
	if !strings.Contains(raw, "://") {
		// "redis:/u:pw@host" would parse with an empty host and the user
		// information in its path: a server of the defaults, and a
		// password in the messages.
		return Config{}, errors.New("redis store: bad URL: want redis:// or rediss://")
	}
	if err := driver.CheckUserinfo(raw); err != nil {
		return Config{}, fmt.Errorf("redis store: bad URL: %w", err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Config{}, fmt.Errorf("redis store: bad URL: %w", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return Config{}, fmt.Errorf("redis store: URL scheme %q, want redis:// or rediss://", u.Scheme)
	}
	if p := u.Port(); p != "" {
		if _, err := driver.ParsePort(p); err != nil {
			return Config{}, fmt.Errorf("redis store: %w", err)
		}
	}
	q := u.Query()
	var cfg Config
	take := func(k string) string {
		v := q.Get(k)
		q.Del(k)
		return v
	}
	cfg.Prefix = take("prefix")
	ca, cert, key := take("ca"), take("cert"), take("key")
	if v := take("allow_eviction"); v != "" {
		if cfg.AllowEviction, err = strconv.ParseBool(v); err != nil {
			return Config{}, fmt.Errorf("redis store: allow_eviction=%q is not a boolean", v)
		}
	}
	u.RawQuery = q.Encode()
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		return Config{}, fmt.Errorf("redis store: bad URL: %w", err)
	}
	if ca != "" || cert != "" || key != "" {
		if opts.TLSConfig == nil {
			return Config{}, errors.New("redis store: ca, cert and key need a rediss:// URL")
		}
		tc, err := driver.LoadTLS(ca, cert, key)
		if err != nil {
			return Config{}, fmt.Errorf("redis store: %w", err)
		}
		// go-redis set the server name from the URL's host; keep it.
		opts.TLSConfig.RootCAs, opts.TLSConfig.Certificates = tc.RootCAs, tc.Certificates
	}
	cfg.Options = opts
	return cfg, nil
}

// OpenURL opens a Store from a redis:// or rediss:// URL (see ParseURL and
// Open).
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}
