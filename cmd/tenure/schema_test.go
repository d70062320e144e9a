//go:build linux

package main

import (
	"strings"
	"testing"
)

func TestSchemaCassandra(t *testing.T) {
	e := newEnv(t)
	code, out, errOut := e.run("schema", "cassandra")
	if code != 0 || !strings.Contains(out, `CREATE KEYSPACE IF NOT EXISTS "tenure"`) ||
		!strings.Contains(out, `CREATE TABLE IF NOT EXISTS "tenure"."tenure_leases"`) || !strings.Contains(out, "fencing_token bigint") {
		t.Fatalf("tenure schema cassandra: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = e.run("schema", "cassandra", "cassandra://h/jaeger_v1?mode=jaeger&table=leases&replication=dc1:3")
	if code != 0 || !strings.Contains(out, `"jaeger_v1"."leases"`) || !strings.Contains(out, "name text") ||
		!strings.Contains(out, `'NetworkTopologyStrategy', 'dc1': 3`) {
		t.Fatalf("jaeger mode schema: exit %d\n%s%s", code, out, errOut)
	}
	for _, args := range [][]string{
		{"schema"},
		{"schema", "postgres"},
		{"schema", "cassandra", "sqlite:/x"},
		{"schema", "cassandra", "cassandra://h/bad-keyspace!"},
	} {
		if code, _, errOut := e.run(args); code != exitUsage || !strings.HasPrefix(errOut, "tenure: ") {
			t.Errorf("%v: exit %d, stderr %q; want 64", args, code, errOut)
		}
	}
}

// A URL that is not Cassandra's is refused without its password; a store
// other than Cassandra points to tenure init.
func TestSchemaRefusalsShowNoSecret(t *testing.T) {
	e := newEnv(t)
	for _, u := range []string{"postgres://u:secretpw@h/x", "redis://:secretpw@h/0"} {
		code, _, errOut := e.run("schema", "cassandra", u)
		if code != exitUsage || strings.Contains(errOut, "secretpw") || !strings.Contains(errOut, "xxxxx") {
			t.Errorf("schema cassandra %s: exit %d, stderr %q; want 64 with the password redacted", u, code, errOut)
		}
	}
	if code, _, errOut := e.run("schema", "postgres"); code != exitUsage || !strings.Contains(errOut, "tenure init") {
		t.Errorf("schema postgres: exit %d, stderr %q; want 64 and a pointer to tenure init", code, errOut)
	}
}
