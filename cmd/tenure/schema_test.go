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

// tenure schema mysql prints what tenure init creates on MySQL, with the
// URL's table; a URL of another store is refused without its password.
func TestSchemaMySQL(t *testing.T) {
	e := newEnv(t)
	code, out, errOut := e.run("schema", "mysql")
	if code != 0 || !strings.Contains(out, "CREATE TABLE IF NOT EXISTS `tenure_leases` (") ||
		!strings.Contains(out, "CREATE TABLE IF NOT EXISTS `tenure_leases_tokens` (") || !strings.Contains(out, "ENGINE=InnoDB") {
		t.Fatalf("tenure schema mysql: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = e.run("schema", "mysql", "mysql://u:secretpw@h/locks?table=locks.app_leases")
	if code != 0 || !strings.Contains(out, "`locks`.`app_leases_tokens`") || strings.Contains(out, "secretpw") {
		t.Fatalf("schema with a table: exit %d\n%s%s", code, out, errOut)
	}
	for _, u := range []string{"postgres://u:secretpw@h/x", "mysql://u:secretpw@h/x?table=bad-name"} {
		code, _, errOut := e.run("schema", "mysql", u)
		if code != exitUsage || strings.Contains(errOut, "secretpw") {
			t.Errorf("schema mysql %s: exit %d, stderr %q; want 64 without the password", u, code, errOut)
		}
	}
}
