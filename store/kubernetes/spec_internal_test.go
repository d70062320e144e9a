package kubernetes

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/tenure-go/tenure/driver"
)

// raw is the record client-go's leader election compares to tell a
// renewal from no change: the JSON of the LeaderElectionRecord it reads from
// the Lease (resourcelock.LeaseLock.Get), whose times are whole seconds.
func raw(t *testing.T, obj *coordinationv1.Lease) string {
	t.Helper()
	b, err := json.Marshal(*resourcelock.LeaseSpecToLeaderElectionRecord(&obj.Spec))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRenewalsLookNewToClientGo: every renewal changes the record that
// client-go's leader election compares, however often the holder renews and
// whatever its wall clock does, so a client-go candidate never counts a
// renewed lease from an earlier renewal. leaseDurationSeconds stays within
// the TTL and maxDurationBump more, and renewTime keeps to the clock (within
// a second) while renewals come at most three times a second, tenure's
// renewal rate for the shortest TTL, 1 s. On the code that wrote renewTime =
// now, two renewals in one second wrote the same record.
func TestRenewalsLookNewToClientGo(t *testing.T) {
	start := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		steps []time.Duration // wall-clock moves between renewals
		ttl   time.Duration
		drift time.Duration // most renewTime may run ahead of the clock
	}{
		{"every TTL/3 of 3s", repeat(time.Second, 30), 3 * time.Second, 0},
		{"every TTL/3 of 1s", repeat(333*time.Millisecond, 300), time.Second, time.Second},
		{"twice a second", repeat(500*time.Millisecond, 300), 2 * time.Second, 0},
		{"retries 10 ms apart", repeat(10*time.Millisecond, 20), 5 * time.Second, 6 * time.Second},
		{"clock set back an hour", append(append(repeat(time.Second, 3), -time.Hour), repeat(time.Second, 5)...), 3 * time.Second, time.Hour + 10*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &coordinationv1.Lease{}
			now := start
			grantSpec(obj, "r", "o", 1, tc.ttl, now, false)
			seen := map[string]bool{raw(t, obj): true}
			for i, d := range tc.steps {
				now = now.Add(d)
				renewSpec(obj, tc.ttl, now)
				r := raw(t, obj)
				if seen[r] {
					t.Fatalf("renewal %d (clock %v) wrote a record client-go saw before: %s", i, now, r)
				}
				seen[r] = true
				dur := time.Duration(*obj.Spec.LeaseDurationSeconds) * time.Second
				if base := time.Duration(seconds(tc.ttl)) * time.Second; dur < base || dur > base+maxDurationBump*time.Second {
					t.Fatalf("renewal %d: leaseDurationSeconds %v outside [%v, %v+%ds]", i, dur, base, base, maxDurationBump)
				}
				if ahead := obj.Spec.RenewTime.Sub(now); ahead > tc.drift {
					t.Fatalf("renewal %d: renewTime %v ahead of the clock; at most %v expected", i, ahead, tc.drift)
				}
			}
		})
	}
}

func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// TestLeaseNames: a resource that is a valid object name is its own Lease's
// name; any other is a valid name of its own, the same every time,
// different for different resources.
func TestLeaseNames(t *testing.T) {
	for _, r := range []string{"my-controller", "a.b.c", "x"} {
		if n, literal := leaseName(r); n != r || !literal {
			t.Errorf("leaseName(%q) = %q, %v; want itself", r, n, literal)
		}
	}
	seen := map[string]string{}
	for _, r := range []string{"My-Controller", "storetest/Test/abc/r", "a/b", "a_b", "ä", "-", ".x", strings.Repeat("x", 254),
		strings.Repeat("é", 128), "UPPER", "upper/", "x\u200by"} {
		n, literal := leaseName(r)
		if literal {
			t.Errorf("leaseName(%q) is literal", r)
		}
		if errs := validation.IsDNS1123Subdomain(n); len(errs) > 0 {
			t.Errorf("leaseName(%q) = %q: %v", r, n, errs)
		}
		if again, _ := leaseName(r); again != n {
			t.Errorf("leaseName(%q) not stable: %q, %q", r, n, again)
		}
		if other, dup := seen[n]; dup {
			t.Errorf("leaseName(%q) = leaseName(%q) = %q", r, other, n)
		}
		seen[n] = r
	}
}

// TestParseURL: the URL forms, and every bad one refused before any I/O.
func TestParseURL(t *testing.T) {
	for raw, want := range map[string]Config{
		"kubernetes:":   {},
		"kubernetes://": {},
		"k8s:":          {},
		"K8S://":        {},
		"kubernetes:?kubeconfig=/etc/k.conf&context=prod&namespace=jobs&dial_timeout=2s": {Kubeconfig: "/etc/k.conf", Context: "prod", Namespace: "jobs", DialTimeout: 2 * time.Second},
	} {
		got, err := ParseURL(raw)
		if err != nil || got.Kubeconfig != want.Kubeconfig || got.Context != want.Context || got.Namespace != want.Namespace || got.DialTimeout != want.DialTimeout {
			t.Errorf("ParseURL(%q) = %+v, %v; want %+v", raw, got, err, want)
		}
	}
	for _, raw := range []string{
		"kubernetes://host:6443", "kubernetes:ns", "kubernetes:?namespace=Bad_Name", "kubernetes:?namespace=",
		"kubernetes:?kubeconfig=", "kubernetes:?context=", "kubernetes:?dial_timeout=-1s", "kubernetes:?dial_timeout=x",
		"kubernetes:?token=secret", "etcd://x:1", "kubernetes:?%zz",
	} {
		if _, err := ParseURL(raw); err == nil {
			t.Errorf("ParseURL(%q): no error", raw)
		}
	}
	if err := (Config{}).CheckTTL(999 * time.Millisecond); !errors.Is(err, driver.ErrInvalidTTL) {
		t.Errorf("CheckTTL(999ms): %v", err)
	}
	if err := (Config{}).CheckTTL(MaxTTL + time.Second); !errors.Is(err, driver.ErrInvalidTTL) {
		t.Errorf("CheckTTL(MaxTTL+1s): %v", err)
	}
	if err := (Config{}).CheckTTL(1500 * time.Millisecond); err != nil {
		t.Errorf("CheckTTL(1.5s): %v", err)
	}
}

// TestNotInCluster: the zero Config outside a pod says to name a
// kubeconfig.
func TestNotInCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	if _, err := Open(t.Context(), Config{}); !errors.Is(err, ErrNotInCluster) {
		t.Fatalf("Open outside a cluster: %v; want ErrNotInCluster", err)
	}
}
