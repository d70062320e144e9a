//go:build linux

package election_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/internal/netfault"
	"github.com/tenure-go/tenure/store/cassandra"
)

// A leader cut off from Cassandra stops leading by its local deadline:
// IsLeader is never true at or after the deadline, the term's context is
// cancelled at it, and OnStoppedLeading runs exactly once. The leader's
// driver reaches Cassandra only through a netfault proxy (no host lookup;
// every address the cluster announces is translated to the proxy); once it
// leads, the proxy black-holes all traffic, or drops only the replies (its
// renewals are then applied but never confirmed). A second candidate, with a
// direct connection, takes over only after the cut-off leader's deadline.
func TestCutOffLeader(t *testing.T) {
	url := cassandraURL(t)
	for _, c := range []struct {
		name string
		mode netfault.Mode
	}{{"Blackhole", netfault.Blackhole}, {"DropReplies", netfault.DropReplies}} {
		t.Run(c.name, func(t *testing.T) { testCutOff(t, url, c.mode) })
	}
}

func testCutOff(t *testing.T, url string, mode netfault.Mode) {
	const ttl, retry = 3 * time.Second, 300 * time.Millisecond
	cfg, err := cassandra.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	host, port := cfg.Hosts[0], cfg.Port
	if port == 0 {
		port = cassandra.DefaultPort
	}
	if h, p, err := net.SplitHostPort(host); err == nil {
		host, port = h, atoi(t, p)
	}
	proxy, err := netfault.Start(net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		t.Fatal(err)
	}
	pa := proxy.Addr()
	pip, pportS, _ := net.SplitHostPort(pa)
	pport := atoi(t, pportS)
	pcfg := cfg
	pcfg.Hosts = []string{pa}
	pcfg.ClusterHook = func(cc *gocql.ClusterConfig) {
		cc.DisableInitialHostLookup = true
		// Whatever address the cluster announces, connect through the proxy.
		cc.AddressTranslator = gocql.AddressTranslatorFunc(func(net.IP, int) (net.IP, int) { return net.ParseIP(pip), pport })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	proxied, err := cassandra.Open(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := cassandra.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	// The proxy goes first, so that closing the session does not wait on
	// black-holed connections.
	defer proxied.Close()
	defer proxy.Close()

	resource := "election-test/cutoff/" + randHex(6)
	var stops atomic.Int32
	stopped := make(chan time.Time, 4)
	started := make(chan context.Context, 4)
	cut, err := election.New(proxied, election.Config{
		Resource: resource, Identity: "cut", TTL: ttl, RetryPeriod: retry,
		OnStartedLeading: func(term context.Context) { started <- term },
		OnStoppedLeading: func() { stops.Add(1); stopped <- time.Now() },
	})
	if err != nil {
		t.Fatal(err)
	}
	cutCtx, cutLeave := context.WithCancel(ctx)
	cutDone := make(chan error, 1)
	go func() { cutDone <- cut.Run(cutCtx) }()
	term := recv(t, started, "the proxied candidate leading")
	ledAt := time.Now()
	lease := cut.Lease()
	if lease == nil {
		t.Fatal("no lease for the term")
	}
	if term.Err() != nil || lease.Context().Err() != nil {
		t.Fatal("the term began with its lease already ended")
	}

	followerStarted := make(chan time.Time, 4)
	observed := make(chan string, 16)
	follower, err := election.New(direct, election.Config{
		Resource: resource, Identity: "direct", TTL: ttl, RetryPeriod: retry,
		OnStartedLeading: func(context.Context) { followerStarted <- time.Now() },
		OnNewLeader:      func(id string) { observed <- id },
	})
	if err != nil {
		t.Fatal(err)
	}
	go follower.Run(ctx)
	if id := recv(t, observed, "the follower observing the leader"); id != "cut" {
		t.Fatalf("the follower observed %q", id)
	}

	// Renewals through the proxy work: wait for one to move the deadline.
	first := lease.Deadline()
	poll(t, 20*time.Second, "a confirmed renewal", func() bool { return lease.Deadline().After(first) })

	// Sample IsLeader and the term's context until the term ends.
	var mu sync.Mutex
	var lastLeader, firstNot, termDoneAt time.Time
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		for {
			now := time.Now()
			is := cut.IsLeader()
			mu.Lock()
			if is {
				lastLeader = now
			} else if firstNot.IsZero() {
				firstNot = now
			}
			mu.Unlock()
			if !is {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	termDone := make(chan struct{})
	go func() {
		defer close(termDone)
		<-term.Done()
		mu.Lock()
		termDoneAt = time.Now()
		mu.Unlock()
	}()

	cutAt := time.Now()
	proxy.SetMode(mode)
	stopAt := recv(t, stopped, "OnStoppedLeading")
	<-samplerDone
	<-termDone                   // OnStoppedLeading runs after the term's context was cancelled
	deadline := lease.Deadline() // final: a lost lease's deadline no longer moves
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%v: cut %v after the term began (after a renewal); deadline %v after the cut; IsLeader last true %v before the deadline, first false %v after it; term context done %v after it; OnStoppedLeading %v after it",
		modeName(mode), cutAt.Sub(ledAt).Round(time.Millisecond), deadline.Sub(cutAt).Round(time.Millisecond),
		deadline.Sub(lastLeader).Round(time.Microsecond), firstNot.Sub(deadline).Round(time.Microsecond),
		termDoneAt.Sub(deadline).Round(time.Microsecond), stopAt.Sub(deadline).Round(time.Microsecond))

	trust := time.Duration(float64(ttl) * (1 - 0.01))
	if deadline.After(cutAt.Add(trust)) {
		t.Fatalf("deadline %v after the cut, beyond TTL·(1−ρ) = %v: a renewal sent after the cut was trusted", deadline.Sub(cutAt), trust)
	}
	if !lastLeader.Before(deadline) {
		t.Fatalf("IsLeader was true %v after the deadline", lastLeader.Sub(deadline))
	}
	if firstNot.Sub(deadline) > 100*time.Millisecond {
		t.Fatalf("IsLeader still true %v after the deadline", firstNot.Sub(deadline))
	}
	if termDoneAt.IsZero() || termDoneAt.Before(deadline) || termDoneAt.Sub(deadline) > 100*time.Millisecond {
		t.Fatalf("the term's context ended %v after the deadline", termDoneAt.Sub(deadline))
	}
	if stopAt.Before(deadline) || stopAt.Sub(deadline) > time.Second {
		t.Fatalf("OnStoppedLeading ran %v after the deadline", stopAt.Sub(deadline))
	}

	// The direct candidate takes over, after the cut-off leader's deadline.
	took := recv(t, followerStarted, "the direct candidate leading")
	t.Logf("%v: the direct candidate leads %v after the cut-off leader's deadline", modeName(mode), took.Sub(deadline).Round(time.Millisecond))
	if !took.After(deadline) {
		t.Fatalf("the direct candidate led %v before the cut-off leader's deadline", deadline.Sub(took))
	}

	// The cut-off candidate leaves; its one term ended once.
	cutLeave()
	select {
	case <-cutDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the cut-off candidate's Run did not return")
	}
	if n := stops.Load(); n != 1 {
		t.Fatalf("OnStoppedLeading ran %d times, want once", n)
	}
	if cut.IsLeader() {
		t.Fatal("the cut-off candidate leads")
	}
	follower.Resign(ctx)
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func modeName(m netfault.Mode) string {
	switch m {
	case netfault.Blackhole:
		return "black hole"
	case netfault.DropReplies:
		return "replies dropped"
	}
	return "pass"
}
