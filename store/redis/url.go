package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
)

func init() {
	store.Register(store.Driver[Config, *Store]{
		Schemes: []string{"redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"},
		Usage: "redis://[user:password@]host[:port][/db][?param=value&...]  one Redis server; " +
			"redis+sentinel://sentinel[,...]/master[/db] for the master Sentinel names, redis+cluster://node[,...] " +
			"for a Redis Cluster, rediss... for TLS (parameters: prefix, ca, cert, key, allow_eviction, wait_replicas, " +
			"wait_timeout, sentinel_username, sentinel_password and go-redis's such as dial_timeout, pool_size)",
		Secrets:  []string{"sentinel_password"},
		Parse:    ParseURL,
		Open:     Open,
		CheckTTL: Config.CheckTTL,
	})
}

// ParseURL turns a store URL into a Config, without connecting (it reads
// the certificate files the URL names):
//
//	redis://[user:password@]host:port[/db][?option=value...]    one server
//	rediss://...      TLS
//	redis+sentinel://[user:password@]host[:port][,host[:port]...]/master[/db][?option=value...]
//	rediss+sentinel://...
//	redis+cluster://[user:password@]host[:port][,host[:port]...][?option=value...]
//	rediss+cluster://...
//
// redis+sentinel:// names the sentinels (port 26379 by default) and the
// name of the master they watch (Config.Failover); the user information
// is the master's and its replicas' (as redis-py's Sentinel, Redisson and
// dapr take it), and sentinel_username and sentinel_password
// authenticate to the sentinels when they need it. redis+cluster://
// names some of a cluster's nodes (port 6379 by default; Config.Cluster).
// Ports must be 1 to 65535. Options are go-redis's (dial_timeout,
// read_timeout, write_timeout, pool_size, skip_verify, ...) plus tenure's
// own: prefix (the key prefix), ca (a PEM file of CAs to verify the server
// with), cert and key (a client certificate for mutual TLS),
// allow_eviction=true, wait_replicas=N and wait_timeout=DURATION
// (Config.WaitReplicas and WaitTimeout). Any other option is an error. The
// error describes a malformed URL and never contains a password.
func ParseURL(raw string) (Config, error) {
	if !strings.Contains(raw, "://") {
		// "redis:/u:pw@host" would parse with an empty host and the user
		// information in its path: a server of the defaults, and a
		// password in the messages.
		return Config{}, errors.New("redis store: bad URL: want redis://, rediss://, redis+sentinel:// or redis+cluster://")
	}
	if err := driver.CheckUserinfo(raw); err != nil {
		return Config{}, fmt.Errorf("redis store: bad URL: %w", err)
	}
	scheme, rest, _ := strings.Cut(raw, "://")
	if info, ok := driver.Userinfo(rest); (ok && strings.Contains(rest[len(info):], "#")) || !ok && strings.Contains(rest, "#") {
		// net/url would drop the fragment: "?prefix=app#1:" is prefix "app".
		return Config{}, errors.New("redis store: bad URL: a '#' starts a fragment, which the store would ignore; write it %23 in a value")
	}
	scheme = strings.ToLower(scheme)
	base, topology, _ := strings.Cut(scheme, "+")
	if base != "redis" && base != "rediss" || topology != "" && topology != "sentinel" && topology != "cluster" {
		return Config{}, fmt.Errorf("redis store: URL scheme %q, want redis://, rediss://, redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster://", scheme)
	}
	var hosts []string
	if topology != "" {
		// Several hosts: the authority is cut out and the first host given
		// to net/url, which takes one.
		info, hasInfo := driver.Userinfo(rest)
		after := rest
		if hasInfo {
			after = rest[len(info)+1:]
		}
		end := strings.IndexAny(after, "/?#")
		if end < 0 {
			end = len(after)
		}
		var err error
		def := "6379"
		if topology == "sentinel" {
			def = "26379"
		}
		if hosts, err = hostList(after[:end], def); err != nil {
			return Config{}, fmt.Errorf("redis store: %w", err)
		}
		if hasInfo {
			info += "@"
		}
		rest = info + hosts[0] + after[end:]
	}
	u, err := url.Parse(base + "://" + rest)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Config{}, fmt.Errorf("redis store: bad URL: %w", err)
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
	if v := take("wait_replicas"); v != "" {
		if cfg.WaitReplicas, err = strconv.Atoi(v); err != nil || cfg.WaitReplicas < 0 {
			return Config{}, fmt.Errorf("redis store: wait_replicas=%q is not a number of replicas", v)
		}
	}
	if v := take("wait_timeout"); v != "" {
		if cfg.WaitTimeout, err = time.ParseDuration(v); err != nil || cfg.WaitTimeout <= 0 {
			return Config{}, fmt.Errorf("redis store: wait_timeout=%q is not a positive duration (such as 500ms)", v)
		}
		if cfg.WaitReplicas == 0 {
			return Config{}, errors.New("redis store: wait_timeout needs wait_replicas (it bounds the WAIT for them)")
		}
	}
	for k, why := range map[string]string{
		"max_retries":             "the store never lets go-redis send a write again: a lost answer is an unknown outcome for the Locker to resolve",
		"context_timeout_enabled": "every call ends with its context",
	} {
		if q.Has(k) {
			return Config{}, fmt.Errorf("redis store: parameter %q is not allowed: %s", k, why)
		}
	}
	sentinelUser, sentinelPassword := take("sentinel_username"), take("sentinel_password")
	if topology != "sentinel" && (sentinelUser != "" || sentinelPassword != "") {
		return Config{}, errors.New("redis store: sentinel_username and sentinel_password need a redis+sentinel:// URL")
	}
	for _, k := range []string{"addr", "master_name", "username", "password", "sentinel_addr"} {
		if q.Has(k) {
			return Config{}, fmt.Errorf("redis store: unknown parameter %q (the URL's hosts, path and user information say it)", k)
		}
	}
	var tlsConfig **tls.Config
	switch topology {
	case "":
		if err := sameDB(strings.TrimPrefix(u.Path, "/"), q); err != nil {
			return Config{}, err
		}
		u.RawQuery = q.Encode()
		opts, err := redis.ParseURL(u.String())
		if err != nil {
			return Config{}, fmt.Errorf("redis store: bad URL: %w", err)
		}
		cfg.Options, tlsConfig = opts, &opts.TLSConfig
	case "sentinel":
		// The path: /master[/db].
		master, db, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
		if master == "" {
			return Config{}, errors.New("redis store: a redis+sentinel:// URL needs the master's name as its path (/mymaster)")
		}
		if err := sameDB(db, q); err != nil {
			return Config{}, err
		}
		// go-redis's form: the user information authenticates to the
		// sentinels, username and password parameters to the master.
		if u.User != nil {
			q.Set("username", u.User.Username())
			if pw, ok := u.User.Password(); ok {
				q.Set("password", pw)
			}
		}
		q.Set("master_name", master)
		for _, h := range hosts[1:] {
			q.Add("addr", h)
		}
		u.User = nil
		if sentinelUser != "" || sentinelPassword != "" {
			u.User = url.UserPassword(sentinelUser, sentinelPassword)
		}
		u.Path = "/" + db
		u.RawQuery = q.Encode()
		opts, err := redis.ParseFailoverURL(u.String())
		if err != nil {
			return Config{}, fmt.Errorf("redis store: bad URL: %w", redactErr(err, u))
		}
		cfg.Failover, tlsConfig = opts, &opts.TLSConfig
	case "cluster":
		if p := strings.TrimPrefix(u.Path, "/"); p != "" && p != "0" {
			return Config{}, errors.New("redis store: a cluster has only database 0: the redis+cluster:// URL takes no other path")
		}
		u.Path = ""
		for _, h := range hosts[1:] {
			q.Add("addr", h)
		}
		u.RawQuery = q.Encode()
		opts, err := redis.ParseClusterURL(u.String())
		if err != nil {
			return Config{}, fmt.Errorf("redis store: bad URL: %w", redactErr(err, u))
		}
		cfg.Cluster, tlsConfig = opts, &opts.TLSConfig
	}
	if ca != "" || cert != "" || key != "" {
		if *tlsConfig == nil {
			return Config{}, errors.New("redis store: ca, cert and key need a rediss:// URL")
		}
		tc, err := driver.LoadTLS(ca, cert, key)
		if err != nil {
			return Config{}, fmt.Errorf("redis store: %w", err)
		}
		// go-redis set the server name from the URL's host; keep it.
		(*tlsConfig).RootCAs, (*tlsConfig).Certificates = tc.RootCAs, tc.Certificates
	}
	return cfg, nil
}

// sameDB returns an error when the query's db parameter names another
// database than the path's (go-redis would take the parameter's).
func sameDB(path string, q url.Values) error {
	path = strings.TrimSuffix(path, "/")
	if !q.Has("db") || path == "" || path == q.Get("db") {
		return nil
	}
	return fmt.Errorf("redis store: the URL's path names database %q and its db parameter %q", path, q.Get("db"))
}

// hostList splits "host[:port],host[:port]..." (IPv6 addresses in
// brackets), with the default port def where none is given.
func hostList(s, def string) ([]string, error) {
	if s == "" {
		return nil, errors.New("bad URL: no host")
	}
	var out []string
	for _, h := range strings.Split(s, ",") {
		host, port := h, def
		if i := strings.LastIndexByte(h, ':'); i >= 0 && (!strings.HasPrefix(h, "[") || strings.HasSuffix(h[:i], "]")) {
			host, port = h[:i], h[i+1:]
		}
		if _, err := driver.ParsePort(port); err != nil {
			return nil, err
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if host == "" || strings.ContainsAny(host, "[]/?#@ ") {
			return nil, fmt.Errorf("bad URL: host %q", host)
		}
		out = append(out, net.JoinHostPort(host, port))
	}
	return out, nil
}

// redactErr removes the passwords of u from err's message (go-redis's
// parsers may quote a parameter's value).
func redactErr(err error, u *url.URL) error {
	msg := err.Error()
	var secrets []string
	if u.User != nil {
		if pw, ok := u.User.Password(); ok {
			secrets = append(secrets, pw)
		}
	}
	if pw := u.Query().Get("password"); pw != "" {
		secrets = append(secrets, pw)
	}
	changed := false
	for _, pw := range secrets {
		if strings.Contains(msg, pw) {
			msg, changed = strings.ReplaceAll(msg, pw, "xxxxx"), true
		}
	}
	if changed {
		return errors.New(msg)
	}
	return err
}

// OpenURL opens a Store from a redis://, rediss://, redis+sentinel:// or
// redis+cluster:// URL (see ParseURL and Open).
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}
