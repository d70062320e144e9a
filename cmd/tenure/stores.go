package main

import (
	"context"
	"errors"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/internal/storeurl"
	"github.com/tenure-go/tenure/store/cassandra"
	"github.com/tenure-go/tenure/store/postgres"
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

func openCassandra(ctx context.Context, raw string) (tenure.Store, error) {
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

func openPostgres(ctx context.Context, raw string) (tenure.Store, error) {
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
