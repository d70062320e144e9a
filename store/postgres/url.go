package postgres

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
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

// urlSpec describes postgres:// URLs, for messages.
var urlSpec = driver.URLSpec{Store: "postgres", Schemes: []string{"postgres", "postgresql"},
	Form: "postgres://[user:password@]host[:port][,host[:port]...]/database[?param=value&...] (or postgresql://)"}

// pgxParams are the URL parameters that pgx (pgconn's connection and TLS
// parameters, pgx's statement cache and query mode) and pgxpool (pool_*)
// read themselves, and application_name, the one run-time parameter that
// pgx sends to the server that the store accepts. Others that pgx would
// send (search_path, statement_timeout, options, ...) are refused: they
// would change how the leases table is found or how its statements run,
// and a misspelt parameter would reach the server unnoticed.
var pgxParams = []string{
	"host", "port", "dbname", "database", "user", "password", "passfile", "connect_timeout",
	"sslmode", "ssl", "sslrootcert", "sslcert", "sslkey", "sslpassword", "sslcertmode", "sslnegotiation", "sslsni",
	"krbspn", "krbsrvname", "target_session_attrs", "service", "servicefile",
	"min_protocol_version", "max_protocol_version", "channel_binding", "require_auth",
	"statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode",
	"pool_max_conns", "pool_min_conns", "pool_min_idle_conns", "pool_max_conn_lifetime", "pool_max_conn_idle_time",
	"pool_max_conn_lifetime_jitter", "pool_health_check_period", "pool_ping_timeout",
	"application_name",
}

// ParseURL turns a postgres:// or postgresql:// URL into a Config, without
// connecting (pgx reads the password, service and certificate files the URL
// names). The URL is pgx's: the parameters that pgx itself interprets are
// accepted (host, port, dbname, user, password, passfile, connect_timeout,
// sslmode, sslrootcert, sslcert, sslkey, sslpassword, sslsni,
// target_session_attrs, service, channel_binding, ..., pgx's
// statement_cache_capacity and default_query_exec_mode, and pgxpool's
// pool_* parameters), and of the run-time parameters that pgx would send
// to the server only application_name; any other parameter is an error,
// and so is one given twice. A port must be 1 to 65535. TLS follows pgx
// (libpq's sslmode), except that sslmode=disable with a certificate file
// named is refused (driver.DecideTLS). Errors wrap ErrBadURL
// (driver.ErrBadURL) and never contain a password.
func ParseURL(raw string) (Config, error) {
	u, err := urlSpec.Split(raw)
	if err != nil {
		return Config{}, err
	}
	if u.Hosts != "" { // none: pgx's default host
		if _, err := driver.HostPorts(u.Hosts, "5432"); err != nil {
			return Config{}, urlSpec.Wrap(err)
		}
	}
	q := u.Query
	q.Known(pgxParams...)
	if v, ok := q.Lookup("ssl"); ok && v != "true" {
		q.Invalid("ssl", "true (sslmode names the other modes)")
	}
	if q.String("sslmode") == "disable" {
		files := driver.TLSFiles{CA: q.String("sslrootcert"), Cert: q.String("sslcert"), Key: q.String("sslkey")}
		if _, err := driver.DecideTLS(driver.TLSSaid{Said: true, By: "sslmode=disable"}, files); err != nil {
			q.Fail(err)
		}
	}
	if err := q.Err(); err != nil {
		return Config{}, urlSpec.Wrap(err)
	}
	pc, err := pgxpool.ParseConfig(raw)
	if err != nil {
		return Config{}, urlSpec.Wrap(pgxErr(err))
	}
	for k := range pc.ConnConfig.RuntimeParams {
		if k != "application_name" { // pgxParams names a parameter that pgx sends to the server
			return Config{}, urlSpec.Errorf("parameter %q: the store does not send it to the server", k)
		}
	}
	return Config{Pool: pc}, nil
}

// pgxErr is err, an error of pgx's parser, without the URL that pgx
// repeats ("cannot parse `postgres://...`: "): the caller names it.
func pgxErr(err error) error {
	var pe *pgconn.ParseConfigError
	msg := err.Error()
	if !errors.As(err, &pe) || !strings.HasPrefix(msg, "cannot parse `") {
		return err
	}
	if _, rest, ok := strings.Cut(msg, "`: "); ok {
		return &pgxParseError{msg: rest, err: err}
	}
	return err
}

// pgxParseError is a pgx parse error with a shorter message.
type pgxParseError struct {
	msg string
	err error
}

func (e *pgxParseError) Error() string { return e.msg }
func (e *pgxParseError) Unwrap() error { return e.err }

// OpenURL opens a Store from a postgres:// URL (see ParseURL and Open). It
// does not create the schema.
func OpenURL(ctx context.Context, raw string) (*Store, error) {
	return driver.OpenURL(ctx, raw, ParseURL, Open)
}
