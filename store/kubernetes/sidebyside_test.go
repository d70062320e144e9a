package kubernetes_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/store/kubernetes"
)

// counter counts a client's requests by method, and successful updates.
type counter struct {
	mu      sync.Mutex
	methods map[string]int
	puts    atomic.Int64 // PUTs answered 200
}

func (c *counter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		c.mu.Lock()
		if c.methods == nil {
			c.methods = map[string]int{}
		}
		c.methods[req.Method]++
		c.mu.Unlock()
		if err == nil && req.Method == http.MethodPut && resp.StatusCode == http.StatusOK {
			c.puts.Add(1)
		}
		return resp, err
	})
}

func (c *counter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.methods {
		n += v
	}
	return n
}

func (c *counter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for _, m := range []string{"GET", "PUT", "POST", "PATCH", "DELETE"} {
		if c.methods[m] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.methods[m], m))
		}
	}
	return strings.Join(parts, ", ")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// sideBySide are the results of TestSideBySideWithClientGo.
type sideBySide struct {
	Settings string `json:"settings"`
	// Requests per renewal of a leader that holds the Lease for Hold.
	Hold     string             `json:"hold"`
	Requests map[string]string  `json:"requests"`
	PerRenew map[string]float64 `json:"requests_per_renewal"`
	// Take-over times, one per round, by "kill tenure" etc.
	Takeover map[string][]float64 `json:"takeover_s"`
	// After the leader's connection to the API server went silent: when it
	// stopped leading, when client-go called OnStoppedLeading, when the
	// follower took over, seconds after the connection went silent.
	Stopped         map[string][]float64 `json:"leader_stopped_s"`
	OnStopped       []float64            `json:"client_go_on_stopped_leading_s"`
	TakeoverSilent  map[string][]float64 `json:"takeover_after_silence_s"`
	MarginOfSilence map[string][]float64 `json:"takeover_minus_leader_stopped_s"`
}

// TestSideBySideWithClientGo measures tenure's Kubernetes store beside
// client-go's leader election, with the same lease duration, in one run:
// requests per renewal, time to take over after the leader is killed
// (SIGKILL) and after it resigns (SIGTERM: tenure releases, client-go with
// ReleaseOnCancel), and what the leader does when its connection to the API
// server goes silent (a black hole: when it stops leading, and when the
// follower takes over). It is a benchmark, not a pass/fail test: set
// TENURE_K8S_SIDE_BY_SIDE to the number of rounds (and
// TENURE_K8S_SIDE_BY_SIDE_OUT to a JSON file for the figures);
// docs/store-kubernetes.md gives the command and the figures.
func TestSideBySideWithClientGo(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("TENURE_K8S_SIDE_BY_SIDE"))
	if rounds <= 0 {
		t.Skip("a benchmark: set TENURE_K8S_SIDE_BY_SIDE=ROUNDS (and TENURE_K8S_SIDE_BY_SIDE_OUT=FILE)")
	}
	storeURL(t)
	cfg, err := kubernetes.ParseURL(os.Getenv("TENURE_KUBERNETES"))
	if err != nil {
		t.Fatal(err)
	}
	admin(t)
	res := sideBySide{
		Settings: fmt.Sprintf("client-go LeaseDuration %v, RenewDeadline %v, RetryPeriod %v, ReleaseOnCancel; tenure TTL %v (renewed every %v), retry %v",
			interopLeaseDuration, interopRenewDeadline, interopRetryPeriod, interopTTL, interopTTL/3, interopRetry),
		Requests: map[string]string{}, PerRenew: map[string]float64{},
		Takeover: map[string][]float64{}, Stopped: map[string][]float64{}, TakeoverSilent: map[string][]float64{}, MarginOfSilence: map[string][]float64{},
	}

	// Requests per renewal: one leader of each kind, in this process.
	hold := 20 * time.Second
	res.Hold = hold.String()
	for _, kind := range []string{roleTenure, roleClientGo} {
		c := &counter{}
		renewals, requests, total := holdFor(t, cfg.Kubeconfig, kind, hold, c)
		res.Requests[kind] = requests
		res.PerRenew[kind] = float64(total) / float64(renewals)
		t.Logf("%s: %d renewals in %v, %s: %.2f requests per renewal", kind, renewals, hold, requests, res.PerRenew[kind])
	}

	// Take-overs between two candidates of one kind.
	for _, kind := range []string{roleTenure, roleClientGo} {
		for _, how := range []string{"kill", "resign"} {
			r := &interopRun{t: t, dir: t.TempDir(), lease: "tenure-sbs-" + randSuffix(), kubeconfig: cfg.Kubeconfig}
			t.Cleanup(func() { r.stopAll() })
			leader := r.start(kind)
			r.waitLeader(leader)
			follower := r.start(kind)
			waitReady(t, follower)
			time.Sleep(2 * time.Second) // the follower has seen the leader
			for range rounds {
				at := mono()
				sig := syscall.SIGKILL
				if how == "resign" {
					sig = syscall.SIGTERM
				}
				_ = leader.cmd.Process.Signal(sig)
				if how == "kill" {
					leader.endedAt.CompareAndSwap(0, mono())
				}
				start := r.waitStart(follower, at)
				<-leader.done
				res.Takeover[how+" "+kind] = append(res.Takeover[how+" "+kind], secs(start-at))
				leader, follower = follower, r.start(kind)
				waitReady(t, follower)
				time.Sleep(time.Duration(2+interopLeaseDuration/time.Second) * time.Second)
			}
			r.stopAll()
		}
	}

	// A leader whose connection goes silent: it reaches the API server
	// through a proxy, which starts to drop everything.
	for _, kind := range []string{roleTenure, roleClientGo} {
		for range rounds {
			r := &interopRun{t: t, dir: t.TempDir(), lease: "tenure-sbs-" + randSuffix(), kubeconfig: cfg.Kubeconfig}
			proxy, proxied := proxiedKubeconfig(t, cfg.Kubeconfig, r.dir)
			leader := r.startWith(kind, proxied)
			r.waitLeader(leader)
			follower := r.start(kind)
			waitReady(t, follower)
			time.Sleep(interopLeaseDuration + time.Second)
			at := mono()
			proxy.SetMode(netfault.Blackhole)
			start := r.waitStart(follower, at)
			var end, stopped int64
			for deadline := time.Now().Add(30 * time.Second); end == 0 && time.Now().Before(deadline); {
				for _, ev := range readEvents(t, leader.events) {
					switch {
					case ev.Ev == "end" && ev.T > at:
						end = ev.T
					case ev.Ev == "stopped" && ev.T > at:
						stopped = ev.T
					}
				}
				time.Sleep(50 * time.Millisecond)
			}
			if kind == roleClientGo {
				for deadline := time.Now().Add(10 * time.Second); stopped == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
					for _, ev := range readEvents(t, leader.events) {
						if ev.Ev == "stopped" && ev.T > at {
							stopped = ev.T
						}
					}
				}
				res.OnStopped = append(res.OnStopped, secs(stopped-at))
			}
			res.Stopped[kind] = append(res.Stopped[kind], secs(end-at))
			res.TakeoverSilent[kind] = append(res.TakeoverSilent[kind], secs(start-at))
			res.MarginOfSilence[kind] = append(res.MarginOfSilence[kind], secs(start-end))
			r.stopAll()
			proxy.Close()
		}
	}

	for k, v := range res.Takeover {
		t.Logf("take-over after %s: median %.2f s of %v", k, median(v), v)
	}
	for k := range res.Stopped {
		t.Logf("silent connection, %s: leader stopped after median %.2f s, follower took over after %.2f s, margin %.2f s",
			k, median(res.Stopped[k]), median(res.TakeoverSilent[k]), median(res.MarginOfSilence[k]))
	}
	if len(res.OnStopped) > 0 {
		t.Logf("client-go's OnStoppedLeading: median %.2f s after the connection went silent", median(res.OnStopped))
	}
	if out := os.Getenv("TENURE_K8S_SIDE_BY_SIDE_OUT"); out != "" {
		b, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func secs(ns int64) float64 { return float64(ns) / 1e9 }

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (r *interopRun) stopAll() {
	for _, c := range r.all {
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}

// waitLeader waits until c leads.
func (r *interopRun) waitLeader(c *candidate) {
	r.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); r.leader() != c; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			r.t.Fatalf("%s never led; logs in %s", c.id, r.dir)
		}
	}
}

// waitStart waits for c's first start event after at and returns its time.
func (r *interopRun) waitStart(c *candidate, at int64) int64 {
	r.t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, ev := range readEvents(r.t, c.events) {
			if ev.Ev == "start" && ev.T > at {
				return ev.T
			}
		}
	}
	r.t.Fatalf("%s did not take over within 60 s; logs in %s", c.id, r.dir)
	return 0
}

func waitReady(t *testing.T, c *candidate) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for _, ev := range readEvents(t, c.events) {
			if ev.Ev == "ready" {
				return
			}
		}
	}
	t.Fatalf("%s not ready within 60 s", c.id)
}

// proxiedKubeconfig starts a fault proxy in front of the kubeconfig's API
// server and writes a kubeconfig that goes through it.
func proxiedKubeconfig(t *testing.T, kubeconfig, dir string) (*netfault.Proxy, string) {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cluster := kc.Clusters[kc.Contexts[kc.CurrentContext].Cluster]
	host := strings.TrimPrefix(cluster.Server, "https://")
	p, err := netfault.Start(host)
	if err != nil {
		t.Fatal(err)
	}
	cluster.Server = "https://" + p.Addr()
	out := filepath.Join(dir, "proxied.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, out); err != nil {
		t.Fatal(err)
	}
	return p, out
}

// holdFor makes one leader of kind hold a Lease for d, its requests counted
// by c from the grant on, and returns how many renewals it made in that
// time (PUTs answered 200) and the requests it sent.
func holdFor(t *testing.T, kubeconfig, kind string, d time.Duration, c *counter) (int, string, int) {
	t.Helper()
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(&clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	rc.QPS = -1
	rc.WrapTransport = c.wrap
	lease := "tenure-sbs-hold-" + randSuffix()
	ctx, cancel := context.WithTimeout(context.Background(), d+30*time.Second)
	defer cancel()
	switch kind {
	case roleTenure:
		s, err := kubernetes.Open(ctx, kubernetes.Config{REST: rc, Namespace: testNamespace})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		lk, err := tenure.New(s)
		if err != nil {
			t.Fatal(err)
		}
		defer lk.Close(ctx)
		l, err := lk.Acquire(ctx, lease, interopTTL)
		if err != nil {
			t.Fatal(err)
		}
		c.reset()
		time.Sleep(d)
		n, requests, total := int(c.puts.Load()), c.String(), c.total()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return n, requests, total
	default:
		cs, err := k8s.NewForConfig(rc)
		if err != nil {
			t.Fatal(err)
		}
		led := make(chan struct{})
		lctx, stop := context.WithCancel(ctx)
		defer stop()
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: &resourcelock.LeaseLock{
				LeaseMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: lease}, Client: cs.CoordinationV1(),
				LockConfig: resourcelock.ResourceLockConfig{Identity: "client-go-hold"},
			},
			LeaseDuration: interopLeaseDuration, RenewDeadline: interopRenewDeadline, RetryPeriod: interopRetryPeriod,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { close(led) },
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { le.Run(lctx); close(done) }()
		<-led
		c.reset()
		time.Sleep(d)
		n, requests, total := int(c.puts.Load()), c.String(), c.total()
		stop()
		<-done
		return n, requests, total
	}
}

func (c *counter) reset() {
	c.mu.Lock()
	c.methods = map[string]int{}
	c.mu.Unlock()
	c.puts.Store(0)
}
