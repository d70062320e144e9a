// Command testreport reads the output of "go test -json" on its standard
// input, prints it as "go test" would without -json (the output of failed
// tests, and a line per package), and ends with a summary of the tests
// that were skipped, and why. It exits 1 when a test or a package failed,
// and when a test of a store was skipped although that store's server was
// started: a skip message that names one of the variables in storeVars
// (TENURE_POSTGRES, ...) while that variable is set. So CI (scripts/test)
// cannot pass while it silently skips a store.
//
//	go test -json ./... | go run ./scripts/testreport [-v]
//
// With -v, the output of every test is printed, as with go test -v.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// storeVars are the variables that name the servers of the stores' tests;
// every test that needs one skips with a message naming it when it is not
// set.
var storeVars = []string{"TENURE_POSTGRES", "TENURE_PGBOUNCER", "TENURE_REDIS", "TENURE_REDIS_SENTINEL", "TENURE_REDIS_CLUSTER", "TENURE_ETCD",
	"TENURE_CASSANDRA", "TENURE_CASSANDRA_CLUSTER", "TENURE_MYSQL", "TENURE_GALERA", "TENURE_KUBERNETES"}

// event is one line of go test -json (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
	Elapsed float64
}

// skip is a skipped test and the reason it gave.
type skip struct {
	pkg, test, reason string
	unexpected        []string // store variables that are set although the skip names them
}

// report is what testreport found.
type report struct {
	failed  bool
	skipped []skip
}

var varRE = regexp.MustCompile(`\bTENURE_[A-Z_]+\b`)

func main() {
	verbose := flag.Bool("v", false, "print the output of every test, as go test -v does")
	flag.Parse()
	r, err := run(os.Stdin, os.Stdout, *verbose, os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if r.failed {
		os.Exit(1)
	}
}

// run reads go test -json from in and writes the report to out; getenv
// reads the environment.
func run(in io.Reader, out io.Writer, verbose bool, getenv func(string) string) (report, error) {
	var r report
	type key struct{ pkg, test string }
	outputs := map[key][]string{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			// Not an event: go test prints build errors and the like as
			// plain text.
			fmt.Fprintln(out, string(line))
			continue
		}
		k := key{ev.Package, ev.Test}
		switch ev.Action {
		case "output":
			if verbose || ev.Test == "" && ev.Output != "PASS\n" {
				fmt.Fprint(out, ev.Output)
			}
			if ev.Test != "" {
				outputs[k] = append(outputs[k], ev.Output)
			}
		case "fail":
			r.failed = true
			if ev.Test != "" && !verbose {
				for _, o := range outputs[k] {
					fmt.Fprint(out, o)
				}
			}
			delete(outputs, k)
		case "skip":
			if ev.Test != "" {
				s := skip{pkg: ev.Package, test: ev.Test, reason: reason(outputs[k])}
				for _, v := range varRE.FindAllString(s.reason, -1) {
					if isStoreVar(v) && getenv(v) != "" {
						s.unexpected = append(s.unexpected, v)
					}
				}
				r.skipped = append(r.skipped, s)
			}
			delete(outputs, k)
		case "pass":
			delete(outputs, k)
		}
	}
	if err := sc.Err(); err != nil {
		return r, err
	}
	summarize(&r, out)
	return r, nil
}

func isStoreVar(v string) bool {
	for _, s := range storeVars {
		if v == s {
			return true
		}
	}
	return false
}

// reason returns what a skipped test printed, without go test's own lines.
func reason(lines []string) string {
	var parts []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		parts = append(parts, t)
	}
	return strings.Join(parts, " ")
}

func summarize(r *report, out io.Writer) {
	if len(r.skipped) == 0 {
		fmt.Fprintln(out, "\nskipped tests: none")
		return
	}
	sort.Slice(r.skipped, func(i, j int) bool {
		if r.skipped[i].pkg != r.skipped[j].pkg {
			return r.skipped[i].pkg < r.skipped[j].pkg
		}
		return r.skipped[i].test < r.skipped[j].test
	})
	fmt.Fprintf(out, "\nskipped tests: %d\n", len(r.skipped))
	var bad []skip
	for _, s := range r.skipped {
		fmt.Fprintf(out, "  %s %s: %s\n", s.pkg, s.test, s.reason)
		if len(s.unexpected) > 0 {
			bad = append(bad, s)
		}
	}
	if len(bad) > 0 {
		r.failed = true
		fmt.Fprintf(out, "\nFAIL: %d tests of a store were skipped although its server was started:\n", len(bad))
		for _, s := range bad {
			fmt.Fprintf(out, "  %s %s (%s is set): %s\n", s.pkg, s.test, strings.Join(s.unexpected, ", "), s.reason)
		}
	}
}
