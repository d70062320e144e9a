package main

import (
	"strings"
	"testing"
)

const stream = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestOK"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"noise of a passing test\n"}
{"Action":"pass","Package":"example.com/a","Test":"TestOK"}
{"Action":"run","Package":"example.com/a","Test":"TestPostgres"}
{"Action":"output","Package":"example.com/a","Test":"TestPostgres","Output":"=== RUN   TestPostgres\n"}
{"Action":"output","Package":"example.com/a","Test":"TestPostgres","Output":"    a_test.go:9: set TENURE_POSTGRES to run this test (scripts/test does)\n"}
{"Action":"output","Package":"example.com/a","Test":"TestPostgres","Output":"--- SKIP: TestPostgres (0.00s)\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestPostgres"}
{"Action":"run","Package":"example.com/a","Test":"TestCluster"}
{"Action":"output","Package":"example.com/a","Test":"TestCluster","Output":"    a_test.go:19: set TENURE_CASSANDRA_CLUSTER to run this test\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestCluster"}
{"Action":"run","Package":"example.com/a","Test":"TestShort"}
{"Action":"output","Package":"example.com/a","Test":"TestShort","Output":"    a_test.go:29: slow; skipped with -short\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestShort"}
{"Action":"output","Package":"example.com/a","Output":"ok  \texample.com/a\t0.1s\n"}
{"Action":"pass","Package":"example.com/a"}
`

const failing = `{"Action":"run","Package":"example.com/b","Test":"TestBad"}
{"Action":"output","Package":"example.com/b","Test":"TestBad","Output":"    b_test.go:3: wrong answer\n"}
{"Action":"output","Package":"example.com/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"example.com/b","Test":"TestBad"}
{"Action":"output","Package":"example.com/b","Output":"FAIL\texample.com/b\t0.1s\n"}
{"Action":"fail","Package":"example.com/b"}
`

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// Skipped tests are listed with their reasons; a run passes while the
// skipped stores' servers are not started.
func TestSkipsSummarized(t *testing.T) {
	var out strings.Builder
	r, err := run(strings.NewReader(stream), &out, false, env(nil))
	if err != nil || r.failed {
		t.Fatalf("failed=%v, %v:\n%s", r.failed, err, out.String())
	}
	s := out.String()
	for _, want := range []string{"ok  \texample.com/a", "skipped tests: 3", "TestPostgres: a_test.go:9: set TENURE_POSTGRES", "TestShort: a_test.go:29: slow"} {
		if !strings.Contains(s, want) {
			t.Errorf("the report should contain %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "noise of a passing test") {
		t.Errorf("the output of a passing test was printed:\n%s", s)
	}
}

// A test of a store skipped although its server was started (its variable
// is set) fails the run; the name of another variable that contains it
// does not count.
func TestSkippedStoreFails(t *testing.T) {
	var out strings.Builder
	r, _ := run(strings.NewReader(stream), &out, false, env(map[string]string{"TENURE_POSTGRES": "postgres://x", "TENURE_CASSANDRA": "127.0.0.1:9042"}))
	if !r.failed || !strings.Contains(out.String(), "FAIL: 1 tests of a store were skipped") || !strings.Contains(out.String(), "TestPostgres (TENURE_POSTGRES is set)") {
		t.Fatalf("failed=%v:\n%s", r.failed, out.String())
	}
	if strings.Contains(out.String(), "TestCluster (") {
		t.Fatalf("TENURE_CASSANDRA counted for TENURE_CASSANDRA_CLUSTER:\n%s", out.String())
	}
}

// A failed test fails the run and its output is printed.
func TestFailurePrinted(t *testing.T) {
	var out strings.Builder
	r, _ := run(strings.NewReader(failing), &out, false, env(nil))
	if !r.failed || !strings.Contains(out.String(), "wrong answer") || !strings.Contains(out.String(), "FAIL\texample.com/b") {
		t.Fatalf("failed=%v:\n%s", r.failed, out.String())
	}
}

// PgBouncer's tests count as a store's: skipped while TENURE_PGBOUNCER is
// set (scripts/test starts PgBouncer) fails the run.
func TestSkippedPoolerFails(t *testing.T) {
	stream := `{"Action":"run","Package":"example.com/p","Test":"TestPooler"}
{"Action":"output","Package":"example.com/p","Test":"TestPooler","Output":"    p_test.go:9: TENURE_PGBOUNCER is not set: these tests need a real server\n"}
{"Action":"skip","Package":"example.com/p","Test":"TestPooler","Elapsed":0}
{"Action":"pass","Package":"example.com/p","Elapsed":0}
`
	var out strings.Builder
	r, _ := run(strings.NewReader(stream), &out, false, env(map[string]string{"TENURE_PGBOUNCER": "postgres://x"}))
	if !r.failed || !strings.Contains(out.String(), "TestPooler (TENURE_PGBOUNCER is set)") {
		t.Fatalf("failed=%v:\n%s", r.failed, out.String())
	}
}
