package cassandra_test

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/cassandra"
)

func TestParseURL(t *testing.T) {
	good := []struct {
		url  string
		want cassandra.Config
	}{
		{"cassandra://localhost", cassandra.Config{Hosts: []string{"localhost"}}},
		{"cassandra://10.0.0.1,10.0.0.2:9142/locks", cassandra.Config{Hosts: []string{"10.0.0.1", "10.0.0.2"}, Port: 9142, Keyspace: "locks"}},
		{"cassandra://[::1],[fe80::2]:9043/ks", cassandra.Config{Hosts: []string{"::1", "fe80::2"}, Port: 9043, Keyspace: "ks"}},
		{"cassandra://bob:p%40ss%3Aw@db1,db2/ks?table=my_leases&mode=jaeger", cassandra.Config{
			Hosts: []string{"db1", "db2"}, Keyspace: "ks", Username: "bob", Password: "p@ss:w", Table: "my_leases", Mode: cassandra.ModeJaeger}},
		{"cassandra://h/ks?serial=local_serial&consistency=LOCAL_QUORUM&local_dc=dc-east.1&timeout=3s&connect_timeout=1500ms", cassandra.Config{
			Hosts: []string{"h"}, Keyspace: "ks", SerialConsistency: gocql.LocalSerial, CommitConsistency: gocql.LocalQuorum,
			LocalDC: "dc-east.1", Timeout: 3 * time.Second, ConnectTimeout: 1500 * time.Millisecond}},
		{"cassandra://h/ks?tls=true&ca=/etc/ca.pem&verify_host=false", cassandra.Config{
			Hosts: []string{"h"}, Keyspace: "ks", TLS: true, CAFile: "/etc/ca.pem", SkipHostVerification: true}},
		{"cassandra://h/ks?cert=/c.pem&key=/k.pem", cassandra.Config{Hosts: []string{"h"}, Keyspace: "ks", CertFile: "/c.pem", KeyFile: "/k.pem"}},
		{"cassandra://h/ks?replication=3", cassandra.Config{Hosts: []string{"h"}, Keyspace: "ks", Replication: cassandra.Replication{Factor: 3}}},
		{"cassandra://h/ks?replication=dc1:3,dc2:2", cassandra.Config{Hosts: []string{"h"}, Keyspace: "ks",
			Replication: cassandra.Replication{DataCenters: map[string]int{"dc1": 3, "dc2": 2}}}},
	}
	for _, tc := range good {
		got, err := cassandra.ParseURL(tc.url)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.url, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseURL(%q) =\n  %+v\nwant\n  %+v", tc.url, got, tc.want)
		}
	}
	bad := map[string]string{
		"":                                          "want cassandra://",
		"postgres://h/ks":                           "want cassandra://",
		"cassandra:///ks":                           "no host",
		"cassandra://h1:9042,h2/ks":                 "only the last host may carry a port",
		"cassandra://h:99999/ks":                    "port",
		"cassandra://h:x/ks":                        "port",
		"cassandra://h/ks;drop":                     "keyspace",
		"cassandra://h/a/b":                         "single keyspace",
		"cassandra://h/1ks":                         "keyspace",
		"cassandra://h/ks?table=x%22y":              "table",
		"cassandra://h/ks?mode=raft":                "mode",
		"cassandra://h/ks?serial=QUORUM":            "serial",
		"cassandra://h/ks?consistency=ONE":          "consistency",
		"cassandra://h/ks?timeout=forever":          "timeout",
		"cassandra://h/ks?timeout=-1s":              "timeout",
		"cassandra://h/ks?tls=maybe":                "tls",
		"cassandra://h/ks?verify_host=false":        "verify_host",
		"cassandra://h/ks?tls=false&ca=/x":          "need TLS",
		"cassandra://h/ks?cert=/c":                  "both",
		"cassandra://h/ks?replication=0":            "replication",
		"cassandra://h/ks?replication=dc'1:3":       "replication",
		"cassandra://h/ks?replication=dc1:3,dc1:2":  "twice",
		"cassandra://h/ks?colour=blue":              "unknown parameter",
		"cassandra://h/ks?table=a&table=b":          "given 2 times",
		"cassandra://h/ks#frag":                     "fragment",
		"cassandra://h/ks?local_dc=x%27y":           "local_dc",
		"cassandra://bad%zzuser@h/ks":               "user name",
		"cassandra://h$/ks":                         "host",
		"cassandra://u:secret-pw@h/ks?mode=nope":    "mode",
		"cassandra://u:secret-pw@h:0/ks":            "port",
		"cassandra://h/ks?connect_timeout=20m":      "connect_timeout",
		"cassandra://h/ks?replication=dc1:3,dc2:x":  "replication",
		"cassandra://h/ks?timeout=1h&mode=native":   "timeout",
		"cassandra://[::1/ks":                       "missing ']'",
		"cassandra://h/ks?replication=dc1:0":        "replication",
		"cassandra://h/ks?ca=":                      "empty file name",
		"cassandra://h,,h2/ks":                      "empty host",
		"cassandra://u:secret-pw@h/ks?colour=green": "unknown parameter",
	}
	for url, want := range bad {
		_, err := cassandra.ParseURL(url)
		if err == nil {
			t.Errorf("ParseURL(%q): no error", url)
			continue
		}
		if !errors.Is(err, cassandra.ErrBadURL) || !errors.Is(err, cassandra.ErrBadConfig) {
			t.Errorf("ParseURL(%q): %v does not wrap ErrBadURL and ErrBadConfig", url, err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ParseURL(%q): %q does not say %q", url, err, want)
		}
		if strings.Contains(err.Error(), "secret-pw") {
			t.Errorf("ParseURL(%q): the error shows the password: %v", url, err)
		}
	}
}

func TestSchema(t *testing.T) {
	cql, err := cassandra.Schema(cassandra.Config{Keyspace: "Locks", Replication: cassandra.Replication{DataCenters: map[string]int{"dc2": 3, "dc1": 3}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`CREATE KEYSPACE IF NOT EXISTS "locks" WITH replication = {'class': 'NetworkTopologyStrategy', 'dc1': 3, 'dc2': 3}`,
		`CREATE TABLE IF NOT EXISTS "locks"."tenure_leases"`,
		"fencing_token bigint",
	} {
		if !strings.Contains(cql, want) {
			t.Errorf("Schema lacks %q:\n%s", want, cql)
		}
	}
	cql, err = cassandra.Schema(cassandra.Config{Mode: cassandra.ModeJaeger})
	if err != nil || !strings.Contains(cql, `"tenure"."leases"`) || !strings.Contains(cql, "PRIMARY KEY (name)") ||
		!strings.Contains(cql, "'replication_factor': 1") || !strings.Contains(cql, "for development") {
		t.Fatalf("Jaeger schema: %v\n%s", err, cql)
	}
	for _, cfg := range []cassandra.Config{
		{Keyspace: "a b"},
		{Table: "x\"; DROP KEYSPACE y; --"},
		{Replication: cassandra.Replication{DataCenters: map[string]int{"dc'": 3}}},
		{Mode: "other"},
	} {
		if _, err := cassandra.Schema(cfg); !errors.Is(err, cassandra.ErrBadConfig) {
			t.Errorf("Schema(%+v): %v; want ErrBadConfig", cfg, err)
		}
	}
}

func TestConfigRejected(t *testing.T) {
	ctx := context.Background()
	for name, cfg := range map[string]cassandra.Config{
		"no hosts":       {},
		"bad host":       {Hosts: []string{"a b"}},
		"serial":         {Hosts: []string{"h"}, SerialConsistency: gocql.Quorum},
		"commit":         {Hosts: []string{"h"}, CommitConsistency: gocql.One},
		"password only":  {Hosts: []string{"h"}, Password: "x"},
		"cert alone":     {Hosts: []string{"h"}, CertFile: "/c"},
		"missing CA":     {Hosts: []string{"h"}, CAFile: "/nonexistent/ca.pem"},
		"skip, no TLS":   {Hosts: []string{"h"}, SkipHostVerification: true},
		"timeout":        {Hosts: []string{"h"}, Timeout: -time.Second},
		"keyspace":       {Hosts: []string{"h"}, Keyspace: "_x"},
		"negative cache": {Hosts: []string{"h"}, TokenCacheSize: -1},
	} {
		start := time.Now()
		_, err := cassandra.Open(ctx, cfg)
		if !errors.Is(err, cassandra.ErrBadConfig) {
			t.Errorf("%s: Open: %v; want ErrBadConfig", name, err)
		}
		if time.Since(start) > time.Second {
			t.Errorf("%s: took %v: did I/O", name, time.Since(start))
		}
	}
}

// TestOpenUnreachable: a cluster that refuses connections or never answers
// fails Open in bounded time.
func TestOpenUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c) // accept, never answer
		}
	}()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refusedAddr := refused.Addr().String()
	refused.Close()
	for name, host := range map[string]string{"silent": ln.Addr().String(), "refused": refusedAddr} {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, err := cassandra.Open(context.Background(), cassandra.Config{
				Hosts: []string{host}, ConnectTimeout: 500 * time.Millisecond, Timeout: 500 * time.Millisecond,
			})
			took := time.Since(start)
			if err == nil {
				t.Fatal("Open of an unreachable cluster succeeded")
			}
			if took > 3*time.Second {
				t.Fatalf("Open took %v; the bound is (hosts+1)·ConnectTimeout + Timeout = 1.5s", took)
			}
			t.Logf("%v after %v", err, took.Round(time.Millisecond))
		})
	}
	// The caller's context bounds it too.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := cassandra.Open(ctx, cassandra.Config{Hosts: []string{ln.Addr().String()}, ConnectTimeout: 5 * time.Second}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open with an expiring context: %v", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Open ignored its context for %v", took)
	}
}

// TestOpenChecksSchema: Open does not create the schema unless asked, and
// says how to create it; Init is idempotent.
func TestOpenChecksSchema(t *testing.T) {
	stores(t)
	ctx := testCtx(t)
	cfg := baseConfig(t, cassandra.ModeNative)
	cfg.Keyspace = runKeyspace
	cfg.Table = "not_created_" + randHex(3)
	_, err := cassandra.Open(ctx, cfg)
	if err == nil || !strings.Contains(err.Error(), "Init") || !errors.Is(err, driver.ErrNoStore) {
		t.Fatalf("Open without the table: %v; want driver.ErrNoStore and an error that says to run Init", err)
	}
	missingKS := cfg
	missingKS.Keyspace = "not_created_" + randHex(3)
	if _, err := cassandra.Open(ctx, missingKS); !errors.Is(err, driver.ErrNoStore) {
		t.Fatalf("Open without the keyspace: %v; want driver.ErrNoStore", err)
	}
	// A table of the other mode lacks the columns: it is not this mode's
	// store.
	cfg.Table = cassandra.DefaultJaegerTable
	if _, err := cassandra.Open(ctx, cfg); err == nil || !strings.Contains(err.Error(), "lacks the columns") || !errors.Is(err, driver.ErrNotStore) {
		t.Fatalf("Open on a Jaeger table in native mode: %v; want driver.ErrNotStore", err)
	}
	cfg.Table = "created_" + randHex(3)
	cfg.CreateSchema = true
	s, err := cassandra.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open with CreateSchema: %v", err)
	}
	s.Close()
	if err := cassandra.Init(ctx, cfg); err != nil {
		t.Fatalf("Init again: %v", err)
	}
	if err := cassandra.Init(ctx, cfg); err != nil {
		t.Fatalf("Init a third time: %v", err)
	}
	// Reserved words work as names (they are quoted).
	cfg.Table = "table"
	if s, err := cassandra.Open(ctx, cfg); err != nil {
		t.Fatalf("table named \"table\": %v", err)
	} else {
		s.Close()
	}
}
