package bench

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store"
	_ "github.com/tenure-go/tenure/store/all" // Open takes any scheme
	"github.com/tenure-go/tenure/store/cassandra"
	"github.com/tenure-go/tenure/store/etcd"
	"github.com/tenure-go/tenure/store/mysql"
	"github.com/tenure-go/tenure/store/postgres"
	"github.com/tenure-go/tenure/store/redis"
	"github.com/tenure-go/tenure/store/sqlite"
)

// Request kinds of the other stores.
const (
	KindCommand = "command" // Redis commands (a script call is one)
	KindRPC     = "rpc"     // etcd gRPC calls: unary calls and streams opened
	// KindStreamMsg counts the messages etcd clients send on streams
	// (keep-alives on a lease's keep-alive stream, watch requests): not
	// calls of their own, but work for the server.
	KindStreamMsg = "stream-msg"
)

// A Target is a store under test, with the meter that counts its requests
// and the baselines that run on the same server.
type Target struct {
	// Name is the store's kind: memory, sqlite, cassandra, postgres, mysql,
	// etcd, redis.
	Name string
	// URL is the store URL (empty for memory), for candidate processes.
	URL   string
	Store driver.Store
	// Meter counts the store's requests; nil for memory.
	Meter *Meter
	// Baselines are the other systems measured on the same server: on
	// Cassandra, tenure acquiring new names each time, the Jaeger protocol
	// and the raw LWT.
	Baselines []System
	// Peers are the libraries measured against tenure by the peers phase
	// (peers.go): on Redis redislock and redsync, on etcd concurrency's
	// Mutex, on PostgreSQL pglock and advisory locks, on MySQL GET_LOCK and
	// a row-lock table; on Cassandra the baselines.
	Peers []System

	closers []func() error
}

// Tenure returns the System of tenure's Locker on the target's store.
func (t *Target) Tenure(opts ...tenure.Option) System {
	return &lockerSystem{store: t.Store, opts: opts}
}

// Systems returns tenure's and the baselines.
func (t *Target) Systems() []System {
	return append([]System{t.Tenure()}, t.Baselines...)
}

// Close closes the target's stores and sessions.
func (t *Target) Close() error {
	var errs []error
	for i := len(t.closers) - 1; i >= 0; i-- {
		errs = append(errs, t.closers[i]())
	}
	return errors.Join(errs...)
}

// Scheme returns the store kind that raw names: "memory" for "memory" or
// "memory:", otherwise the URL's scheme (postgresql, rediss and mariadb
// folded into postgres, redis and mysql).
func Scheme(raw string) string {
	s, _, ok := strings.Cut(raw, ":")
	if !ok {
		s = raw
	}
	s = strings.ToLower(s)
	switch s {
	case "postgresql":
		return "postgres"
	case "rediss":
		return "redis"
	case "mariadb":
		return "mysql"
	case "rediss+cluster":
		return "redis+cluster"
	case "rediss+sentinel":
		return "redis+sentinel"
	}
	return s
}

// Open opens the target that raw names ("memory", or a store URL as the
// tenure command takes them) through the store registry, with its meter
// installed in the store's configuration. Cassandra's keyspace and tables
// and PostgreSQL's table are created when missing.
func Open(ctx context.Context, raw string) (*Target, error) {
	t := &Target{Name: Scheme(raw), URL: raw}
	err := t.open(ctx, raw)
	if err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *Target) open(ctx context.Context, raw string) error {
	if t.Name == "memory" {
		raw, t.URL = "memory:", ""
	}
	u, err := store.Parse(raw)
	if err != nil {
		return err
	}
	switch c := u.Config().(type) {
	case *cassandra.Config:
		return openCassandra(ctx, raw, u, c, t)
	case *sqlite.Config:
		t.Meter = meterSQLite(c.Path)
	case *postgres.Config:
		t.Meter = NewMeter(KindStatement)
		c.Pool.ConnConfig.Tracer = pgTracer{t.Meter}
		if err := u.Init(ctx); err != nil {
			return err
		}
		pl, closePl, err := newPglockSystem(c.Pool, t.Meter)
		if err != nil {
			return err
		}
		t.closers = append(t.closers, closePl)
		t.Peers = []System{pl, &pgAdvisorySystem{cfg: c.Pool.ConnConfig}}
	case *mysql.Config:
		if err := openMySQL(ctx, u, c, t); err != nil {
			return err
		}
	case *etcd.Config:
		t.Meter = NewMeter(KindRPC, KindStreamMsg)
		m := t.Meter
		c.Client.DialOptions = append(c.Client.DialOptions,
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				m.Add(KindRPC, 1)
				return invoker(ctx, method, req, reply, cc, opts...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				m.Add(KindRPC, 1)
				s, err := streamer(ctx, desc, cc, method, opts...)
				if err != nil {
					return nil, err
				}
				return countingStream{s, m}, nil
			}))
		peers, closePeers, err := etcdPeers(c.Client)
		if err != nil {
			return err
		}
		t.Peers = peers
		t.closers = append(t.closers, closePeers)
	case *redis.Config:
		t.Meter = NewMeter(KindCommand)
		c.Hooks = append(c.Hooks, redisHook{t.Meter})
		var peers []System
		var closePeers func() error
		switch {
		case c.Cluster != nil:
			peers, closePeers = redisClusterPeers(c.Cluster, t.Meter)
		case c.Options != nil:
			peers, closePeers = redisPeers(c.Options, t.Meter)
		default: // Sentinel: no peer
			closePeers = func() error { return nil }
		}
		t.Peers = peers
		t.closers = append(t.closers, closePeers)
	}
	s, err := u.Open(ctx)
	if err != nil {
		return err
	}
	t.Store = s
	t.closers = append(t.closers, s.Close)
	return nil
}

// countingStream counts the messages a client sends on a gRPC stream.
type countingStream struct {
	grpc.ClientStream
	m *Meter
}

func (s countingStream) SendMsg(msg any) error {
	s.m.Add(KindStreamMsg, 1)
	return s.ClientStream.SendMsg(msg)
}

// pgTracer counts the statements pgx sends (BEGIN and COMMIT included).
type pgTracer struct{ m *Meter }

func (p pgTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	p.m.Add(KindStatement, 1)
	return ctx
}

func (p pgTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// redisHook counts the commands go-redis sends.
type redisHook struct{ m *Meter }

func (h redisHook) DialHook(next goredis.DialHook) goredis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h redisHook) ProcessHook(next goredis.ProcessHook) goredis.ProcessHook {
	return func(ctx context.Context, cmd goredis.Cmder) error {
		h.m.Add(KindCommand, 1)
		return next(ctx, cmd)
	}
}

func (h redisHook) ProcessPipelineHook(next goredis.ProcessPipelineHook) goredis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []goredis.Cmder) error {
		h.m.Add(KindCommand, int64(len(cmds)))
		return next(ctx, cmds)
	}
}
