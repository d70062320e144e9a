package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/storeurl"
	"github.com/tenure-go/tenure/store/cassandra"
	"github.com/tenure-go/tenure/store/etcd"
	"github.com/tenure-go/tenure/store/postgres"
	"github.com/tenure-go/tenure/store/redis"
)

// The stores that tenure can open besides sqlite: (which internal/storeurl
// registers). A store package that registers itself in its init function
// runs first, so registering here only fills in what is missing.
func init() {
	if !storeurl.Registered("cassandra") {
		storeurl.Register("cassandra", openCassandra,
			"cassandra://[user:password@]host1[,host2][:port]/keyspace[?param=value&...]  a Cassandra cluster (parameters: table, mode, serial, consistency, local_dc, timeout, connect_timeout, tls, ca, cert, key, verify_host; replication for tenure init)")
		storeurl.RegisterInit("cassandra", initCassandra)
	}
	for _, scheme := range []string{"postgres", "postgresql"} {
		if !storeurl.Registered(scheme) {
			storeurl.Register(scheme, openPostgres,
				scheme+"://[user:password@]host[:port]/database[?param=value&...]  a PostgreSQL database (libpq parameters such as sslmode; run tenure init once)")
			storeurl.RegisterInit(scheme, initPostgres)
		}
	}
	if !storeurl.Registered("etcd") {
		storeurl.Register("etcd", openEtcd,
			"etcd://[user:password@]host1:2379[,host2:2379][?param=value&...]  an etcd cluster (parameters: prefix, dial_timeout, tls, ca, cert, key, username, password)")
	}
	for _, scheme := range []string{"redis", "rediss"} {
		if !storeurl.Registered(scheme) {
			storeurl.Register(scheme, openRedis,
				scheme+"://[user:password@]host[:port][/db][?param=value&...]  a single Redis instance (rediss: TLS; parameters: prefix, dial_timeout, ca, cert, key, allow_eviction; see docs/stores.md for the durability fencing tokens need)")
		}
	}
}

// setDriverLoggers sends what store drivers log on their own (go-redis
// prints dial failures) to tenure's logger at debug level, instead of raw
// lines on stderr.
func setDriverLoggers(log *slog.Logger) {
	goredis.SetLogger(driverLog{log.With("driver", "go-redis")})
}

type driverLog struct{ log *slog.Logger }

func (d driverLog) Printf(ctx context.Context, format string, v ...any) {
	d.log.DebugContext(ctx, strings.TrimSpace(fmt.Sprintf(format, v...)))
}

func openEtcd(ctx context.Context, raw string) (driver.Store, error) {
	cfg, err := etcd.ParseURL(raw)
	if err != nil {
		return nil, storeurl.BadURL(err)
	}
	s, err := etcd.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func openRedis(ctx context.Context, raw string) (driver.Store, error) {
	cfg, err := redis.ParseURL(raw)
	if err != nil {
		return nil, storeurl.BadURL(err)
	}
	s, err := redis.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func cassandraConfig(raw string) (cassandra.Config, error) {
	cfg, err := cassandra.ParseURL(raw)
	if err != nil {
		return cfg, storeurl.BadURL(err)
	}
	return cfg, nil
}

// cassandraErr marks configuration errors as bad URLs: the configuration
// comes from the URL.
func cassandraErr(err error) error {
	if errors.Is(err, cassandra.ErrBadURL) || errors.Is(err, cassandra.ErrBadConfig) {
		return storeurl.BadURL(err)
	}
	return err
}

func openCassandra(ctx context.Context, raw string) (driver.Store, error) {
	cfg, err := cassandraConfig(raw)
	if err != nil {
		return nil, err
	}
	s, err := cassandra.Open(ctx, cfg)
	if err != nil {
		return nil, cassandraErr(err)
	}
	return s, nil
}

func initCassandra(ctx context.Context, raw string) error {
	cfg, err := cassandraConfig(raw)
	if err != nil {
		return err
	}
	return cassandraErr(cassandra.Init(ctx, cfg))
}

func postgresConfig(raw string) (postgres.Config, error) {
	cfg, err := postgres.ParseURL(raw)
	if err != nil {
		return cfg, storeurl.BadURL(err)
	}
	return cfg, nil
}

func openPostgres(ctx context.Context, raw string) (driver.Store, error) {
	cfg, err := postgresConfig(raw)
	if err != nil {
		return nil, err
	}
	s, err := postgres.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func initPostgres(ctx context.Context, raw string) error {
	cfg, err := postgresConfig(raw)
	if err != nil {
		return err
	}
	s, err := postgres.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Init(ctx)
}
