package main

import (
	"context"
	"errors"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/internal/storeurl"
	"github.com/tenure-go/tenure/store/cassandra"
)

// The stores that tenure can open besides sqlite: (which internal/storeurl
// registers). A store package that registers itself in its init function
// runs first, so registering here only fills in what is missing.
func init() {
	if !storeurl.Registered("cassandra") {
		storeurl.Register("cassandra", openCassandra,
			"cassandra://[user:password@]host1[,host2][:port]/keyspace[?param=value&...]  a Cassandra cluster (parameters: table, mode, serial, consistency, local_dc, timeout, connect_timeout, tls, ca, cert, key, verify_host)")
	}
}

func openCassandra(ctx context.Context, raw string) (tenure.Store, error) {
	s, err := cassandra.OpenURL(ctx, raw)
	switch {
	case errors.Is(err, cassandra.ErrBadURL), errors.Is(err, cassandra.ErrBadConfig):
		return nil, storeurl.BadURL(err)
	case err != nil:
		return nil, err
	}
	return s, nil
}
