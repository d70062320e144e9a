package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
)

func init() {
	store.Register(store.Driver[Config, *Store]{
		Schemes: []string{"postgres", "postgresql"},
		Usage: "postgres://[user:password@]host[:port]/database[?param=value&...]  a PostgreSQL database (also postgresql://; " +
			"pgx's connection, TLS and pool parameters such as sslmode, sslrootcert, sslcert, sslkey, connect_timeout, " +
			"pool_max_conns, and application_name; run tenure init once)",
		Secrets:  []string{"sslpassword"},
		Parse:    ParseURL,
		Open:     Open,
		Init:     Init,
		CheckTTL: Config.CheckTTL,
	})
}

// serverParams are the URL parameters that pgx passes to the server as
// run-time parameters and that the store accepts. Others that pgx would
// pass (search_path, statement_timeout, options, ...) are refused: they
// would change how the leases table is found or how its statements run,
// and a misspelt parameter would reach the server unnoticed.
var serverParams = map[string]bool{"application_name": true}

// ParseURL turns a postgres:// or postgresql:// URL into a Config, without
// connecting (pgx reads the password, service and certificate files the URL
// names). The URL is pgx's: the parameters that pgx itself interprets are
// accepted (host, port, dbname, user, password, passfile, connect_timeout,
// sslmode, sslrootcert, sslcert, sslkey, sslpassword, sslsni,
// target_session_attrs, service, channel_binding, ..., pgx's
// statement_cache_capacity and default_query_exec_mode, and pgxpool's
// pool_* parameters), and of the run-time parameters that pgx would send
// to the server only application_name; any other parameter is an error. A
// port must be 1 to 65535. The error describes a malformed URL and never
// contains a password.
func ParseURL(raw string) (Config, error) {
	if !strings.Contains(raw, "://") {
		// "postgres:/u:pw@host" would parse with an empty host and the user
		// information in its path: a server of the defaults, and a
		// password in the messages.
		return Config{}, errors.New("postgres store: bad URL: want postgres:// or postgresql://")
	}
	if err := driver.CheckUserinfo(raw); err != nil {
		return Config{}, fmt.Errorf("postgres store: bad URL: %w", err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // url.Error repeats the URL, password included
		}
		return Config{}, fmt.Errorf("postgres store: bad URL: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return Config{}, fmt.Errorf("postgres store: URL scheme %q, want postgres:// or postgresql://", u.Scheme)
	}
	if p := u.Port(); p != "" || strings.HasSuffix(u.Host, ":") {
		if _, err := driver.ParsePort(p); err != nil {
			return Config{}, fmt.Errorf("postgres store: %w", err)
		}
	}
	pc, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return Config{}, fmt.Errorf("postgres store: bad URL: %w", err)
	}
	var unknown []string
	for k := range u.Query() {
		if _, server := pc.ConnConfig.RuntimeParams[k]; server && !serverParams[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Config{}, fmt.Errorf("postgres store: unknown parameter %s (pgx's connection, TLS and pool parameters and application_name are accepted)",
			strings.Join(unknown, ", "))
	}
	return Config{Pool: pc}, nil
}

// OpenURL opens a Store from a postgres:// URL (see ParseURL and Open). It
// does not create the schema.
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}
