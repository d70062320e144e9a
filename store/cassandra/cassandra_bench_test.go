package cassandra_test

import (
	"fmt"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/store/cassandra"
	"github.com/tenure-go/tenure/store/storetest"
)

// The Cassandra benchmarks need a real server (TENURE_CASSANDRA, see
// main_test.go) and report lightweight transactions per operation, counted
// by the driver's observers:
//
//	eval "$(scripts/cassandra env)"
//	go test -run '^$' -bench . -benchtime 200x ./store/cassandra/

func observedStore(b *testing.B, mode cassandra.Mode) (*cassandra.Store, func() int64) {
	c := &lwtCounter{}
	s := openStore(b, mode, func(cfg *cassandra.Config) {
		cfg.ClusterHook = func(cc *gocql.ClusterConfig) { cc.QueryObserver, cc.BatchObserver = c, c }
	})
	return s, func() int64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.log = nil
		return int64(c.lwt)
	}
}

// BenchmarkCassandra: tenure's store and Locker (native mode).
func BenchmarkCassandra(b *testing.B) {
	s, lwts := observedStore(b, cassandra.ModeNative)
	storetest.Benchmarks(b, s, resource(b, "bench"), "LWT", lwts)
}

// BenchmarkJaegerProtocol: a client issuing Jaeger's statements: Acquire of
// a free resource (INSERT IF NOT EXISTS), renewal of a held lease (the
// INSERT, then UPDATE IF owner = ?), and Forfeit (DELETE IF owner = ?).
func BenchmarkJaegerProtocol(b *testing.B) {
	s, lwts := observedStore(b, cassandra.ModeJaeger)
	jc := newJaegerClient(s.Session(), "jaeger-bench")
	report := func(b *testing.B, before int64) {
		b.ReportMetric(float64(lwts()-before)/float64(b.N), "LWT/op")
	}
	b.Run("AcquireForfeit", func(b *testing.B) {
		r := resource(b, "r")
		before := lwts()
		for b.Loop() {
			if ok, err := jc.Acquire(r, 30*time.Second); !ok || err != nil {
				b.Fatal(ok, err)
			}
			if ok, err := jc.Forfeit(r); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
		report(b, before)
	})
	b.Run("Renew", func(b *testing.B) {
		r := resource(b, "r")
		if ok, err := jc.Acquire(r, 30*time.Second); !ok || err != nil {
			b.Fatal(ok, err)
		}
		defer jc.Forfeit(r)
		before := lwts()
		for b.Loop() {
			if ok, err := jc.Acquire(r, 30*time.Second); !ok || err != nil {
				b.Fatal(ok, err)
			}
		}
		report(b, before)
	})
}

// BenchmarkRawLWT is the floor: one INSERT ... IF NOT EXISTS USING TTL of a
// new row.
func BenchmarkRawLWT(b *testing.B) {
	s, lwts := observedStore(b, cassandra.ModeJaeger)
	r := resource(b, "r")
	stmt := `INSERT INTO ` + runKeyspace + `.` + cassandra.DefaultJaegerTable + ` (name, owner) VALUES (?, ?) IF NOT EXISTS USING TTL 60`
	before := lwts()
	i := 0
	for b.Loop() {
		i++
		var name, owner string
		applied, err := s.Session().Query(stmt, fmt.Sprintf("%s/%d", r, i), "floor").ScanCAS(&name, &owner)
		if err != nil || !applied {
			b.Fatal(applied, err)
		}
	}
	b.ReportMetric(float64(lwts()-before)/float64(b.N), "LWT/op")
}
