package redis_test

// Helpers shared, as copies, by the tests of store/postgres, store/etcd and
// store/redis.

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/driver"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func resource(t testing.TB) string {
	o, _ := tenure.NewOwner("r")
	return "tenuretest/" + t.Name() + "/" + tenure.OwnerID(o) + o[len(o)-8:]
}

func locker(t testing.TB, s driver.Store, opts ...tenure.Option) *tenure.Locker {
	t.Helper()
	lk, err := tenure.New(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = lk.Close(ctx)
	})
	return lk
}

// wakeOnce makes A (on sa) hold r, starts B (on sb, retry interval one
// hour) waiting for it, releases A and returns how long after the release B
// was granted.
func wakeOnce(tb testing.TB, sa, sb driver.Store, r string) time.Duration {
	tb.Helper()
	ctx := ctxT(tb)
	a := locker(tb, sa)
	b := locker(tb, sb, tenure.WithRetry(time.Hour, time.Hour))
	la, err := a.TryAcquire(ctx, r, 30*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	got := make(chan *tenure.Lease, 1)
	waiting := make(chan struct{})
	go func() {
		var once sync.Once
		l, err := b.Acquire(ctx, r, 30*time.Second, tenure.OnWait(func(*tenure.HeldError, time.Duration) { once.Do(func() { close(waiting) }) }))
		if err != nil {
			tb.Error(err)
		}
		got <- l
	}()
	<-waiting
	released := time.Now()
	if err := la.Release(ctx); err != nil {
		tb.Fatal(err)
	}
	select {
	case lb := <-got:
		d := time.Since(released)
		if lb == nil {
			tb.FailNow()
		}
		if err := lb.Release(ctx); err != nil {
			tb.Fatal(err)
		}
		return d
	case <-time.After(30 * time.Second):
		tb.Fatal("waiter not granted within 30 s of the release (notification lost?)")
		return 0
	}
}

// BenchmarkWakeOnRelease measures the time from a holder's release to the
// grant of a waiter that is woken by the release notification (its backoff
// is an hour). It reports the median and 99th percentile.
func BenchmarkWakeOnRelease(b *testing.B) {
	sa, sb := open(b), open(b)
	r := resource(b)
	var lat []time.Duration
	for b.Loop() {
		lat = append(lat, wakeOnce(b, sa, sb, r))
	}
	reportLatency(b, lat)
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "ms-median")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "ms-p99")
	b.ReportMetric(0, "ns/op")
}

// serverScript returns the path of scripts/NAME when server fault tests are
// enabled, or skips.
func serverScript(t *testing.T, name string) string {
	t.Helper()
	if os.Getenv("TENURE_SERVER_FAULTS") != "1" {
		t.Skip("set TENURE_SERVER_FAULTS=1 to kill and restart the server from scripts/" + name)
	}
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "scripts", name)
	if _, err := os.Stat(p); err != nil {
		t.Skip(err)
	}
	return p
}

func run(t *testing.T, script string, args ...string) {
	t.Helper()
	out, err := exec.Command(script, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", script, args, err, out)
	}
}
