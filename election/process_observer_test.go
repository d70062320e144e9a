//go:build linux

package election_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/store"
)

// observation is what the test's observer saw, when.
type observation struct {
	l    election.Leader
	mono int64
}

// observeRun runs three candidate processes, each publishing a value, and
// an Observer in the test process on a store connection of its own. Round
// after round the leader is killed (SIGKILL), resigns (SIGUSR1: Resign),
// leaves (SIGTERM: Run's context), or has its lease freed by an operator
// (a forced release, as "tenure release --force" does); each term lasts
// until the observer has seen it. At the end every term that began, in
// every process, was observed, in token order, with the identity and the
// published value of the process that led it, and nothing else was.
func observeRun(t *testing.T, cl *cluster, rounds int) {
	o, err := election.NewObserver(cl.store, election.ObserverConfig{Resource: cl.resource, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	var mu sync.Mutex
	var seen []observation
	done := make(chan struct{})
	go func() {
		defer close(done)
		for l := range o.Observe(ctx) {
			mu.Lock()
			seen = append(seen, observation{l, mono()})
			mu.Unlock()
		}
	}()
	defer func() { stop(); <-done }()
	observed := func(what string, cond func(last election.Leader) bool) {
		t.Helper()
		poll(t, 60*time.Second, "the observer to see "+what, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(seen) > 0 && cond(seen[len(seen)-1].l)
		})
	}

	live := []*candidate{cl.spawn(), cl.spawn(), cl.spawn()}
	actions := []string{"kill", "resign", "forced release", "leave"}
	count := map[string]int{}
	for round := range rounds {
		lead, token := cl.leader(live)
		observed(fmt.Sprintf("%s lead (token %d)", lead.name, token), func(l election.Leader) bool { return l.Token == token })
		action := actions[round%len(actions)]
		count[action]++
		switch action {
		case "kill":
			lead.cmd.Process.Signal(syscall.SIGKILL)
		case "resign":
			lead.cmd.Process.Signal(syscall.SIGUSR1)
		case "leave":
			lead.cmd.Process.Signal(syscall.SIGTERM)
		case "forced release":
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			rec, err := cl.store.Get(rctx, cl.resource)
			if err == nil && rec.Token == token {
				err = cl.store.Release(rctx, cl.resource, rec.Owner, rec.Token)
			}
			cancel()
			if err != nil {
				t.Fatalf("forced release of token %d: %v", token, err)
			}
		}
		t.Logf("round %d: %s of %s (token %d)", round, action, lead.name, token)
		cl.firstStartAfter(token, 60*time.Second)
		if action == "forced release" {
			continue // the candidate stays, and campaigns again
		}
		select {
		case <-lead.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit after %s; stderr:\n%s", lead.name, action, lead.stderr())
		}
		if action != "kill" && lead.err != nil {
			t.Fatalf("%s exited with %v after %s; stderr:\n%s", lead.name, lead.err, action, lead.stderr())
		}
		live = slices.DeleteFunc(live, func(c *candidate) bool { return c == lead })
		live = append(live, cl.spawn())
	}
	lead, token := cl.leader(live)
	observed(fmt.Sprintf("%s lead (token %d)", lead.name, token), func(l election.Leader) bool { return l.Token == token })
	for _, c := range live {
		c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range live {
		<-c.done
	}
	observed("nobody lead", func(l election.Leader) bool { return l.Owner == "" })
	stop()
	<-done

	// The terms that began, from the candidates' own records.
	type term struct {
		token uint64
		who   string
	}
	var terms []term
	for _, c := range cl.cands {
		for _, e := range readPEvents(t, c.out) {
			if e.kind == "begin" {
				terms = append(terms, term{e.token, c.name})
			}
		}
	}
	sort.Slice(terms, func(i, j int) bool { return terms[i].token < terms[j].token })
	var leaders []observation
	nones := 0
	for _, s := range seen {
		if s.l.Owner == "" {
			nones++
			continue
		}
		leaders = append(leaders, s)
	}
	if len(leaders) != len(terms) {
		t.Fatalf("%d terms began, the observer saw %d leaders:\nterms %v\nseen %v", len(terms), len(leaders), terms, describeAll(seen))
	}
	for i, tm := range terms {
		l := leaders[i].l
		if l.Token != tm.token || l.Identity != tm.who || l.Value != valueOf(tm.who) {
			t.Fatalf("observation %d is %q (%q, token %d); the term that began is %s's, token %d, value %q",
				i, l.Identity, l.Value, l.Token, tm.who, tm.token, valueOf(tm.who))
		}
	}
	t.Logf("%d terms (%v), all observed in order with their published values; %d observations of nobody leading",
		len(terms), count, nones)
}

func describeAll(obs []observation) []string {
	var out []string
	for _, o := range obs {
		out = append(out, describe(o.l))
	}
	return out
}

func TestObserverFollowsProcessesSQLite(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "leases.db")
	observeRun(t, newCluster(t, url, time.Second, 200*time.Millisecond), 8)
}

// The same on the real servers the test environment names.
func TestObserverFollowsProcessesOnServers(t *testing.T) {
	urls := map[string]string{}
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
	if len(urls) == 0 {
		t.Skip("no server: set TENURE_POSTGRES, TENURE_ETCD, TENURE_REDIS or TENURE_CASSANDRA (scripts/test does)")
	}
	for name, url := range urls {
		t.Run(name, func(t *testing.T) {
			if name == "postgres" {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				err := store.Init(ctx, url)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			ttl := time.Second
			if name == "cassandra" {
				ttl = 2 * time.Second
			}
			observeRun(t, newCluster(t, url, ttl, 200*time.Millisecond), 8)
		})
	}
}
