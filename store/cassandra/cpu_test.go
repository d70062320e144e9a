package cassandra_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure/store/cassandra"
)

// TestServerCPUPerGrant measures what each way of granting a lease costs
// the Cassandra server, in CPU time per operation, read from
// /proc/PID/stat of the server process (so the server must run on this
// host) around a fixed number of operations of each kind, minus the
// server's idle rate; kinds alternate round by round. It is a measurement,
// not a pass/fail test: it runs only when TENURE_CASSANDRA_PID names the
// server's process, and logs a table. Docs/benchmarks.md has the command
// and the figures.
//
// Kinds (every write on a partition of its own per operation):
//
//	raw-insert       INSERT (name, owner) IF NOT EXISTS USING TTL, new names (the raw LWT of the peers bench)
//	raw-insert-wide  the same on the native table with all five columns (token with the lease's TTL: not safe)
//	grant-new        Store.Acquire of a never-seen resource: batch INSERT IF NOT EXISTS USING TTL 0 + UPDATE USING TTL
//	raw-update-used  UPDATE owner IF owner = null on a released row (a used partition; no token)
//	grant-used       Store.Acquire of a released resource, current view: batch UPDATE IF owner = null AND token = ? + UPDATE token USING TTL 0
//	single-used      one UPDATE of all columns IF owner = null AND token = ? on a released row (token with the lease's TTL: not safe)
func TestServerCPUPerGrant(t *testing.T) {
	pidS := os.Getenv("TENURE_CASSANDRA_PID")
	if pidS == "" {
		t.Skip("a measurement: set TENURE_CASSANDRA_PID to the pid of the local Cassandra process the tests use")
	}
	pid, err := strconv.Atoi(pidS)
	if err != nil {
		t.Fatal(err)
	}
	ops := envInt(t, "TENURE_CPU_OPS", 1000)
	rounds := envInt(t, "TENURE_CPU_ROUNDS", 2)
	clients := []int{1, 8}
	if c := os.Getenv("TENURE_CPU_CLIENTS"); c != "" {
		clients = nil
		for _, f := range strings.Split(c, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			clients = append(clients, n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	native, jaeger := stores(t)
	s := openStore(t, cassandra.ModeNative, nil)
	nt := runKeyspace + "." + native.Table()
	jt := runKeyspace + "." + jaeger.Table()
	sess := s.Session()
	prefix := resource(t, "")

	// prepare makes n released rows (used partitions with a token).
	prepare := func(kind string, n int) []string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("%s%s/%d/%d", prefix, kind, time.Now().UnixNano(), i)
			rec, err := s.Acquire(ctx, names[i], "prep", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Release(ctx, names[i], "prep", rec.Token); err != nil {
				t.Fatal(err)
			}
		}
		return names
	}
	newNames := func(kind string, n int) []string {
		names := make([]string, n)
		for i := range names {
			names[i] = fmt.Sprintf("%s%s/%d/%d", prefix, kind, time.Now().UnixNano(), i)
		}
		return names
	}
	cas := func(stmt string, args ...any) error {
		m := map[string]any{}
		applied, err := sess.Query(stmt, args...).MapScanCAS(m)
		if err == nil && !applied {
			err = fmt.Errorf("not applied: %v", m)
		}
		return err
	}
	tokens := map[string]int64{} // single-used: each row's token, read before the timed part
	type kind struct {
		name  string
		setup func(n int) []string
		op    func(name string) error
	}
	kinds := []kind{
		{"raw-insert", func(n int) []string { return newNames("ri", n) }, func(r string) error {
			return cas(`INSERT INTO `+jt+` (name, owner) VALUES (?, ?) IF NOT EXISTS USING TTL 60`, r, "me")
		}},
		{"raw-insert-wide", func(n int) []string { return newNames("rw", n) }, func(r string) error {
			return cas(`INSERT INTO `+nt+` (resource, owner, fencing_token, ttl_ms, write_id) VALUES (?, ?, ?, ?, ?) IF NOT EXISTS USING TTL 60`, r, "me", int64(1), int64(59000), int64(7))
		}},
		{"grant-new", func(n int) []string { return newNames("gn", n) }, func(r string) error {
			_, err := s.Acquire(ctx, r, "me", 59*time.Second)
			return err
		}},
		{"raw-update-used", func(n int) []string { return prepare("ru", n) }, func(r string) error {
			return cas(`UPDATE `+nt+` USING TTL 60 SET owner = ? WHERE resource = ? IF owner = null`, "me", r)
		}},
		{"grant-used", func(n int) []string { return prepare("gu", n) }, func(r string) error {
			_, err := s.Acquire(ctx, r, "me", 59*time.Second)
			return err
		}},
		{"single-used", func(n int) []string {
			names := prepare("su", n)
			clear(tokens)
			for _, r := range names {
				var tok int64
				if err := sess.Query(`SELECT fencing_token FROM `+nt+` WHERE resource = ?`, r).Scan(&tok); err != nil {
					t.Fatal(err)
				}
				tokens[r] = tok
			}
			return names
		}, func(r string) error {
			tok := tokens[r]
			return cas(`UPDATE `+nt+` USING TTL 60 SET owner = ?, ttl_ms = ?, write_id = ?, fencing_token = ? WHERE resource = ? IF owner = null AND fencing_token = ?`,
				"me", int64(59000), int64(7), tok+1, r, tok)
		}},
	}
	ticksPerSec := 100.0 // USER_HZ on Linux
	ticks := func() float64 {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		u, _ := strconv.ParseFloat(f[11], 64) // utime (field 14)
		k, _ := strconv.ParseFloat(f[12], 64) // stime (field 15)
		return u + k
	}
	// The idle rate, over 5 s.
	t0, w0 := ticks(), time.Now()
	time.Sleep(5 * time.Second)
	idle := (ticks() - t0) / time.Since(w0).Seconds()
	t.Logf("server idle: %.1f ticks/s", idle)

	type result struct{ cpuMs, wallUs []float64 }
	results := map[string]*result{}
	for _, c := range clients {
		for round := 0; round < rounds; round++ {
			for _, k := range kinds {
				names := k.setup(ops)
				time.Sleep(500 * time.Millisecond) // let the preparation's work settle
				var next atomic.Int64
				var wg sync.WaitGroup
				var failed atomic.Value
				t1, w1 := ticks(), time.Now()
				for range c {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							i := next.Add(1) - 1
							if i >= int64(len(names)) {
								return
							}
							if err := k.op(names[i]); err != nil {
								failed.Store(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				wall := time.Since(w1)
				used := ticks() - t1 - idle*wall.Seconds()
				if err, _ := failed.Load().(error); err != nil {
					t.Fatalf("%s: %v", k.name, err)
				}
				key := fmt.Sprintf("%d/%s", c, k.name)
				if results[key] == nil {
					results[key] = &result{}
				}
				results[key].cpuMs = append(results[key].cpuMs, used/ticksPerSec*1000/float64(ops))
				results[key].wallUs = append(results[key].wallUs, float64(wall.Microseconds())/float64(ops))
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| clients | kind | server CPU ms/op (rounds) | median | min | median vs raw-insert | min vs raw-insert | wall µs/op (median) |\n|---|---|---|---|---|---|---|---|\n")
	for _, c := range clients {
		base := median(results[fmt.Sprintf("%d/raw-insert", c)].cpuMs)
		baseMin := minOf(results[fmt.Sprintf("%d/raw-insert", c)].cpuMs)
		for _, k := range kinds {
			r := results[fmt.Sprintf("%d/%s", c, k.name)]
			var each []string
			for _, v := range r.cpuMs {
				each = append(each, fmt.Sprintf("%.2f", v))
			}
			m := median(r.cpuMs)
			fmt.Fprintf(&b, "| %d | %s | %s | %.2f | %.2f | %.2f | %.2f | %.0f |\n", c, k.name, strings.Join(each, " · "), m, minOf(r.cpuMs), m/base, minOf(r.cpuMs)/baseMin, median(r.wallUs))
		}
	}
	t.Log(b.String())
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, v)
	}
	return n
}

func minOf(v []float64) float64 {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
