package kubernetes_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/internal/testserver"
	"github.com/tenure-go/tenure/store/kubernetes"
)

// proxiedStore opens a store whose connection to the API server goes
// through a fault proxy.
func proxiedStore(t *testing.T) (*kubernetes.Store, *netfault.Proxy) {
	t.Helper()
	cfg, err := kubernetes.ParseURL(storeURL(t))
	if err != nil {
		t.Fatal(err)
	}
	admin(t)
	p, kc := proxiedKubeconfig(t, cfg.Kubeconfig, t.TempDir())
	t.Cleanup(func() { p.Close() })
	return open(t, func(c *kubernetes.Config) { c.Kubeconfig = kc }), p
}

// TestLostRepliesAreUnknownOutcomes: a write that the API server applied but
// whose answer was lost is an unknown outcome, never granted or lost, and
// the next call resolves it from the Lease's holder: the retried acquire is
// the same grant (the token the lost write gave), the next renewal renews
// it (its condition, the Store's last write, fails: it reads the Lease and
// finds it still the grant's). The acquire's answer is dropped after the
// request went through (a transport that loses the answers of writes); the
// renewal's on a real connection (a proxy that drops every answer).
func TestLostRepliesAreUnknownOutcomes(t *testing.T) {
	cs, rc := admin(t)
	var drop atomic.Bool
	rc.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err == nil && drop.Load() && req.Method != http.MethodGet {
				resp.Body.Close()
				return nil, syscall.ECONNRESET
			}
			return resp, err
		})
	}
	s := open(t, func(c *kubernetes.Config) { c.REST = rc })
	r := testserver.Resource(t)
	a := owner(t, "a")
	drop.Store(true)
	_, err := s.Acquire(testserver.Ctx(t), r, a, time.Minute)
	drop.Store(false)
	if !errors.Is(err, tenure.ErrUnknownOutcome) {
		t.Fatalf("acquire whose answer was lost: %v; want ErrUnknownOutcome", err)
	}
	obj, err := cs.CoordinationV1().Leases(testNamespace).Get(testserver.Ctx(t), kubernetes.LeaseName(r), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the acquire was not applied: %v", err)
	}
	rec, err := s.Acquire(testserver.Ctx(t), r, a, time.Minute)
	if err != nil {
		t.Fatalf("retried acquire: %v", err)
	}
	if got := obj.Annotations[kubernetes.AnnotationGrant]; got != strconv.FormatUint(rec.Token, 10)+" "+a || rec.Owner != a {
		t.Fatalf("retried acquire: %+v; the lost acquire wrote %q", rec, got)
	}

	ps, p := proxiedStore(t)
	if err := ps.Renew(testserver.Ctx(t), r, a, rec.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	before, err := cs.CoordinationV1().Leases(testNamespace).Get(testserver.Ctx(t), kubernetes.LeaseName(r), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.SetMode(netfault.DropReplies)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err = ps.Renew(ctx, r, a, rec.Token, time.Minute)
	cancel()
	if !errors.Is(err, tenure.ErrUnknownOutcome) || errors.Is(err, tenure.ErrLeaseLost) {
		t.Fatalf("renewal whose answer was lost: %v; want ErrUnknownOutcome", err)
	}
	p.SetMode(netfault.Pass)
	p.Reset()
	after, err := cs.CoordinationV1().Leases(testNamespace).Get(testserver.Ctx(t), kubernetes.LeaseName(r), metav1.GetOptions{})
	if err != nil || after.ResourceVersion == before.ResourceVersion {
		t.Fatalf("the renewal whose answer was lost was not applied (%v)", err)
	}
	if err := ps.Renew(testserver.Ctx(t), r, a, rec.Token, time.Minute); err != nil {
		t.Fatalf("renewal after an applied renewal whose answer was lost: %v", err)
	}
	if err := ps.Release(testserver.Ctx(t), r, a, rec.Token); err != nil {
		t.Fatal(err)
	}
}

// TestBlackHoleBoundedAndRecovered: with the connection black-holed, each
// call ends with its context (an unknown outcome for a write), and once the
// network is back the Store works again within its HTTP/2 health check,
// without being reopened.
func TestBlackHoleBoundedAndRecovered(t *testing.T) {
	s, p := proxiedStore(t)
	r := testserver.Resource(t)
	a := owner(t, "a")
	rec, err := s.Acquire(testserver.Ctx(t), r, a, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p.SetMode(netfault.Blackhole)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	err = s.Renew(ctx, r, a, rec.Token, time.Minute)
	cancel()
	if !errors.Is(err, tenure.ErrUnknownOutcome) || time.Since(start) > 5*time.Second {
		t.Fatalf("renewal into a black hole: %v after %v; want ErrUnknownOutcome after about 1 s", err, time.Since(start))
	}
	p.SetMode(netfault.Pass)
	healed := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := s.Renew(ctx, r, a, rec.Token, time.Minute)
		cancel()
		if err == nil {
			break
		}
		if errors.Is(err, tenure.ErrLeaseLost) {
			t.Fatalf("renewal after the black hole: %v", err)
		}
		if time.Since(healed) > 30*time.Second {
			t.Fatalf("no renewal 30 s after the network came back: %v", err)
		}
	}
	t.Logf("renewed %v after the network came back", time.Since(healed).Round(time.Millisecond))
}
