//go:build linux

package election_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/store"
)

// handOverStores returns the store URLs the hand-over runs on: a SQLite
// file, and every real server the test environment names (scripts/test
// starts them all).
func handOverStores(t *testing.T) map[string]string {
	urls := map[string]string{"sqlite": "sqlite:" + filepath.Join(t.TempDir(), "leases.db")}
	if u := os.Getenv("TENURE_POSTGRES"); u != "" {
		urls["postgres"] = u
	}
	if h := os.Getenv("TENURE_ETCD"); h != "" {
		urls["etcd"] = "etcd://" + h
	}
	if u := os.Getenv("TENURE_REDIS"); u != "" {
		urls["redis"] = u
	}
	if os.Getenv("TENURE_CASSANDRA") != "" {
		urls["cassandra"] = cassandraURL(t)
	}
	return urls
}

func openStore(t *testing.T, url string) driver.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The scenario of the hand-over: two candidates, each with a store
// connection of its own; the leader's OnStartedLeading works until its
// context ends and then needs 500 ms to wind down (still working). When the
// leader leaves (Resign, Run's context, Close), the other candidate must
// not start its work before the leader's work returned. Before the
// hand-over waited, on SQLite: "808ms a.Resign returned; 828ms b starts
// work; 1.309s a work returned".
func TestHandOverTwoCandidates(t *testing.T) {
	for name, url := range handOverStores(t) {
		t.Run(name, func(t *testing.T) {
			if name == "postgres" {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := store.Init(ctx, url)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			for way := range leaveWays {
				t.Run(way, func(t *testing.T) { handOverTwoCandidates(t, url, way) })
			}
		})
	}
}

func handOverTwoCandidates(t *testing.T, url, way string) {
	const ttl, retry, windDown = 2 * time.Second, 100 * time.Millisecond, 500 * time.Millisecond
	resource := "election-handover/" + randHex(6)
	var mu sync.Mutex
	var aLastWork, aReturned, bFirstWork int64
	aLeads, aDone := make(chan struct{}), make(chan struct{})
	a, err := election.New(openStore(t, url), election.Config{Resource: resource, Identity: "a", TTL: ttl, RetryPeriod: retry,
		OnStartedLeading: func(term context.Context) {
			close(aLeads)
			work := func() { mu.Lock(); aLastWork = mono(); mu.Unlock() }
			for term.Err() == nil {
				work()
				time.Sleep(5 * time.Millisecond)
			}
			// Winding down: the work goes on for 500 ms after the context
			// ended.
			for end := time.Now().Add(windDown); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
				work()
			}
			work()
			mu.Lock()
			aReturned = mono()
			mu.Unlock()
			close(aDone)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	bLeads := make(chan struct{})
	b, err := election.New(openStore(t, url), election.Config{Resource: resource, Identity: "b", TTL: ttl, RetryPeriod: retry,
		OnStartedLeading: func(term context.Context) {
			mu.Lock()
			bFirstWork = mono()
			mu.Unlock()
			close(bLeads)
			<-term.Done()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	runA := make(chan error, 1)
	go func() { runA <- a.Run(ctx) }()
	recv(t, aLeads, "a leads")
	bObserved := make(chan struct{})
	var once sync.Once
	o, _ := election.NewObserver(openStore(t, url), election.ObserverConfig{Resource: resource, PollInterval: 20 * time.Millisecond})
	go b.Run(ctxT(t))
	defer b.Resign(context.Background())
	// Let b campaign (and be refused) a few times first.
	time.Sleep(3 * retry)
	go func() {
		for l := range o.Observe(ctxT(t)) {
			if l.Identity == "b" {
				once.Do(func() { close(bObserved) })
			}
		}
	}()

	from := mono()
	left := leaveWays[way](a, cancel)
	if err := recv(t, left, way); err != nil {
		t.Fatalf("%s: %v", way, err)
	}
	leftAt := mono()
	recv(t, runA, "a's Run")
	recv(t, bLeads, "b leads")
	recv(t, aDone, "a's work to return")
	mu.Lock()
	aLast, aRet, bFirst := aLastWork, aReturned, bFirstWork
	mu.Unlock()
	ms := func(at int64) time.Duration { return time.Duration(at - from).Round(time.Millisecond) }
	t.Logf("%s: %v a's %s returned; %v a's work returned; %v b starts work (TTL %v, retry %v, wind-down %v)",
		way, ms(leftAt), way, ms(aRet), ms(bFirst), ttl, retry, windDown)
	if aRet == 0 || bFirst <= aLast {
		t.Fatalf("%s: b started work %v before a's work returned", way, time.Duration(aLast-bFirst))
	}
	if way != "context" && leftAt < aRet {
		t.Fatalf("%s returned %v before a's work did", way, time.Duration(aRet-leftAt))
	}
	if gap := time.Duration(bFirst - aRet); gap > ttl {
		t.Errorf("%s: b started %v after a's work returned: the lease was not released (it expired)", way, gap)
	}
	recv(t, bObserved, "the observer sees b")
}
