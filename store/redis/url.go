package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"

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

// urlSpec describes the store's URLs, for messages.
var urlSpec = driver.URLSpec{
	Store:   "redis",
	Schemes: []string{"redis", "rediss", "redis+sentinel", "rediss+sentinel", "redis+cluster", "rediss+cluster"},
	Form: "redis://[user:password@]host[:port][/db], redis+sentinel://[user:password@]host[:port][,host[:port]...]/master[/db], " +
		"redis+cluster://[user:password@]host[:port][,host[:port]...] (rediss... for TLS)",
}

// goRedisParams are the parameters that go-redis's URL parsers read, for
// one server (redis.ParseURL), a Sentinel master (ParseFailoverURL) and a
// cluster (ParseClusterURL), less those that the URL's hosts, path and
// user information give (addr, master_name, username, password): the
// store passes them on. skip_verify is read only with TLS. Those whose
// values the store always replaces are refused (storeSets).
var goRedisParams = map[string][]string{
	"": {"db", "idle_timeout", "max_conn_age"},
	"sentinel": {"db", "route_by_latency", "route_by_latency_tolerance", "route_randomly", "replica_only",
		"use_disconnected_replicas", "dialer_retries", "dialer_retry_timeout",
		"disableIdentity", "identitySuffix", "unstable_resp3"},
	"cluster": {"max_redirects", "read_only", "route_by_latency", "route_by_latency_tolerance", "route_randomly",
		"dialer_retries", "dialer_retry_timeout", "failing_timeout_seconds"},
	"all": {"protocol", "client_name", "min_retry_backoff", "max_retry_backoff", "dial_timeout",
		"read_timeout", "write_timeout", "pool_fifo", "pool_size", "pool_timeout", "min_idle_conns", "max_idle_conns",
		"max_active_conns", "max_concurrent_dials", "pipeline_pool_size", "pipeline_read_buffer_size",
		"pipeline_write_buffer_size", "conn_max_idle_time", "conn_max_lifetime", "conn_max_lifetime_jitter"},
}

// storeSets are go-redis's parameters whose values the store always
// replaces, and why: a URL that gives one is refused rather than ignored.
var storeSets = map[string]string{
	"max_retries":             "the store never lets go-redis send a write again: a lost answer is an unknown outcome for the Locker to resolve",
	"context_timeout_enabled": "every call ends with its context",
}

// ParseURL turns a store URL into a Config, without connecting (it reads
// the certificate files the URL names):
//
//	redis://[user:password@]host:port[/db][?param=value...]    one server
//	rediss://...      TLS
//	redis+sentinel://[user:password@]host[:port][,host[:port]...]/master[/db][?param=value...]
//	rediss+sentinel://...
//	redis+cluster://[user:password@]host[:port][,host[:port]...][?param=value...]
//	rediss+cluster://...
//
// redis+sentinel:// names the sentinels (port 26379 by default) and the
// name of the master they watch (Config.Failover); the user information
// is the master's and its replicas' (as redis-py's Sentinel, Redisson and
// dapr take it), and sentinel_username and sentinel_password
// authenticate to the sentinels when they need it. redis+cluster://
// names some of a cluster's nodes (port 6379 by default; Config.Cluster).
// Ports must be 1 to 65535. Parameters are go-redis's (dial_timeout,
// read_timeout, write_timeout, pool_size, skip_verify, ...) plus tenure's
// own: prefix (the key prefix), ca (a PEM file of CAs to verify the server
// with), cert and key (a client certificate for mutual TLS; ca, cert and
// key need a rediss scheme), allow_eviction=true, wait_replicas=N and
// wait_timeout=DURATION (Config.WaitReplicas and WaitTimeout). Any other
// parameter is an error, and so is one given twice. Errors wrap ErrBadURL
// (driver.ErrBadURL) and never contain a password.
func ParseURL(raw string) (Config, error) {
	u, err := urlSpec.Split(raw)
	if err != nil {
		return Config{}, err
	}
	base, topology, _ := strings.Cut(u.Scheme, "+")
	q := u.Query
	cfg := Config{
		Prefix:        q.String("prefix"),
		AllowEviction: q.Bool("allow_eviction"),
		WaitReplicas:  q.Int("wait_replicas", 0, math.MaxInt),
		WaitTimeout:   q.Duration("wait_timeout", 0),
	}
	if q.Has("wait_timeout") && cfg.WaitReplicas == 0 {
		q.Fail(errors.New("wait_timeout needs wait_replicas (it bounds the WAIT for them)"))
	}
	for _, k := range []string{"max_retries", "context_timeout_enabled"} {
		if q.Has(k) {
			return Config{}, urlSpec.Errorf("parameter %s: the store sets it itself: %s", k, storeSets[k])
		}
	}
	_, files := q.TLS(driver.TLSSaid{Said: true, On: base == "rediss", By: "the scheme " + u.Scheme + "://"})
	var sentinelAuth *url.Userinfo
	if topology == "sentinel" {
		sentinelAuth = userinfo(q.String("sentinel_username"), q.String("sentinel_password"))
	} else if q.Has("sentinel_username") || q.Has("sentinel_password") {
		return Config{}, urlSpec.Errorf("sentinel_username and sentinel_password need a redis+sentinel:// URL")
	}
	for _, k := range []string{"addr", "master_name", "username", "password", "sentinel_addr"} {
		if q.Has(k) {
			return Config{}, urlSpec.Errorf("parameter %q: the URL's hosts, path and user information say it", k)
		}
	}
	pass := goRedisQuery(q, topology, base == "rediss")
	if err := q.Err(); err != nil {
		return Config{}, urlSpec.Wrap(err)
	}
	var tc **tls.Config
	switch topology {
	case "":
		tc, err = cfg.single(u, base, pass)
	case "sentinel":
		tc, err = cfg.sentinel(u, base, pass, sentinelAuth)
	case "cluster":
		tc, err = cfg.cluster(u, base, pass)
	}
	if err != nil {
		return Config{}, urlSpec.Wrap(redactErr(err, u.Password, sentinelAuth))
	}
	if files.Any() {
		c, err := files.Load()
		if err != nil {
			return Config{}, urlSpec.Wrap(err)
		}
		// go-redis set the server name from the URL's host; keep it.
		(*tc).RootCAs, (*tc).Certificates = c.RootCAs, c.Certificates
	}
	return cfg, nil
}

// goRedisQuery returns the parameters of q that go-redis reads for the
// topology ("", "sentinel", "cluster"), for its parser, and makes them
// known to q.
func goRedisQuery(q *driver.Query, topology string, useTLS bool) url.Values {
	names := append(slices.Clone(goRedisParams[topology]), goRedisParams["all"]...)
	if useTLS && topology != "cluster" {
		names = append(names, "skip_verify")
	}
	pass := url.Values{}
	for _, k := range names {
		if v, ok := q.Lookup(k); ok {
			pass.Set(k, v)
		}
	}
	return pass
}

// single sets c.Options from a redis:// or rediss:// URL, and returns
// where its TLS configuration is.
func (c *Config) single(u *driver.URL, base string, pass url.Values) (**tls.Config, error) {
	host := u.Hosts
	if host != "" { // empty: go-redis's default, localhost:6379
		hosts, err := driver.HostPorts(u.Hosts, "6379")
		if err != nil {
			return nil, err
		}
		if len(hosts) > 1 {
			return nil, errors.New("one host only (redis+sentinel:// and redis+cluster:// name several)")
		}
		host = hosts[0]
	}
	if err := sameDB(strings.TrimPrefix(u.Path, "/"), pass); err != nil {
		return nil, err
	}
	gu := url.URL{Scheme: base, User: userinfoOf(u), Host: host, Path: u.Path, RawQuery: pass.Encode()}
	opts, err := redis.ParseURL(gu.String())
	if err != nil {
		return nil, goRedisErr(err)
	}
	c.Options = opts
	return &opts.TLSConfig, nil
}

// sentinel sets c.Failover from a redis+sentinel:// URL, whose path is
// /master[/db]: the sentinels are the hosts, the user information the
// master's; auth, when not nil, authenticates to the sentinels.
func (c *Config) sentinel(u *driver.URL, base string, pass url.Values, auth *url.Userinfo) (**tls.Config, error) {
	hosts, err := driver.HostPorts(u.Hosts, "26379")
	if err != nil {
		return nil, err
	}
	master, db, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if master == "" {
		return nil, errors.New("a redis+sentinel:// URL needs the master's name as its path (/mymaster)")
	}
	if err := sameDB(db, pass); err != nil {
		return nil, err
	}
	// go-redis's form: the user information authenticates to the
	// sentinels, username and password parameters to the master.
	if u.HasUser {
		pass.Set("username", u.User)
		if u.HasPassword {
			pass.Set("password", u.Password)
		}
	}
	pass.Set("master_name", master)
	for _, h := range hosts[1:] {
		pass.Add("addr", h)
	}
	gu := url.URL{Scheme: base, User: auth, Host: hosts[0], Path: "/" + db, RawQuery: pass.Encode()}
	opts, err := redis.ParseFailoverURL(gu.String())
	if err != nil {
		return nil, goRedisErr(err)
	}
	c.Failover = opts
	return &opts.TLSConfig, nil
}

// cluster sets c.Cluster from a redis+cluster:// URL.
func (c *Config) cluster(u *driver.URL, base string, pass url.Values) (**tls.Config, error) {
	hosts, err := driver.HostPorts(u.Hosts, "6379")
	if err != nil {
		return nil, err
	}
	if p := strings.TrimPrefix(u.Path, "/"); p != "" && p != "0" {
		return nil, errors.New("a cluster has only database 0: the redis+cluster:// URL takes no other path")
	}
	for _, h := range hosts[1:] {
		pass.Add("addr", h)
	}
	gu := url.URL{Scheme: base, User: userinfoOf(u), Host: hosts[0], RawQuery: pass.Encode()}
	opts, err := redis.ParseClusterURL(gu.String())
	if err != nil {
		return nil, goRedisErr(err)
	}
	c.Cluster = opts
	return &opts.TLSConfig, nil
}

// sameDB returns an error when the query's db parameter names another
// database than the path's (go-redis would take the parameter's).
func sameDB(path string, pass url.Values) error {
	path = strings.TrimSuffix(path, "/")
	if !pass.Has("db") || path == "" || path == pass.Get("db") {
		return nil
	}
	return fmt.Errorf("the URL's path names database %q and its db parameter %q", path, pass.Get("db"))
}

// userinfoOf returns u's user information for net/url, nil when it has
// none.
func userinfoOf(u *driver.URL) *url.Userinfo {
	switch {
	case u.HasPassword:
		return url.UserPassword(u.User, u.Password)
	case u.HasUser:
		return url.User(u.User)
	}
	return nil
}

// userinfo returns user and password for net/url, nil when both are empty.
func userinfo(user, password string) *url.Userinfo {
	if user == "" && password == "" {
		return nil
	}
	return url.UserPassword(user, password)
}

// goRedisErr is err, an error of go-redis's URL parsers, without the
// "redis: " that starts it: the store names itself.
func goRedisErr(err error) error {
	if msg, ok := strings.CutPrefix(err.Error(), "redis: "); ok {
		return errors.New(msg)
	}
	return err
}

// redactErr removes the passwords from err's message (go-redis's parsers
// may quote a parameter's value).
func redactErr(err error, password string, sentinel *url.Userinfo) error {
	msg := err.Error()
	secrets := []string{password}
	if sentinel != nil {
		pw, _ := sentinel.Password()
		secrets = append(secrets, pw)
	}
	for _, pw := range secrets {
		if pw != "" {
			msg = strings.ReplaceAll(msg, pw, "xxxxx")
		}
	}
	if msg != err.Error() {
		return errors.New(msg)
	}
	return err
}

// OpenURL opens a Store from a redis://, rediss://, redis+sentinel:// or
// redis+cluster:// URL (see ParseURL and Open).
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}
