package election_test

// The examples run on the SQLite store in a temporary directory, as
// candidates on one host would; across hosts the store is store/postgres,
// store/etcd, store/redis or store/cassandra. Fencing tokens are large
// numbers, so the examples compare them rather than print them.

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/store/sqlite"
)

// openStore opens a SQLite store in a new temporary directory and returns
// it with a function that closes it and removes the directory.
func openExampleStore() (*sqlite.Store, func()) {
	dir, err := os.MkdirTemp("", "tenure-example")
	if err != nil {
		log.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(dir, "leases.db")})
	if err != nil {
		log.Fatal(err)
	}
	return st, func() { st.Close(); os.RemoveAll(dir) }
}

// Two candidates: the first leads; when it leaves (Resign, or its Run's
// context ends), it releases the lease and the second takes over within
// one retry period, with a larger fencing token.
func ExampleCandidate() {
	st, done := openExampleStore()
	defer done()
	type term struct {
		who   string
		token uint64
	}
	terms := make(chan term, 2)
	candidate := func(id string) *election.Candidate {
		c, err := election.New(st, election.Config{
			Resource:    "sampling-calculator",
			Identity:    id,
			TTL:         15 * time.Second,
			RetryPeriod: 100 * time.Millisecond, // default 2s
			OnStartedLeading: func(ctx context.Context) {
				// Work until ctx is done, passing the term's fencing
				// token to what the work writes to.
				terms <- term{id, tenure.LeaseFromContext(ctx).Token()}
				<-ctx.Done()
			},
		},
			// The candidate's Locker options decide its lease, as for
			// tenure.New: here a renewal every 3s (default TTL/3).
			tenure.WithRenewInterval(3*time.Second),
		)
		if err != nil {
			log.Fatal(err)
		}
		return c
	}
	ctx := context.Background()
	c1, c2 := candidate("collector-1"), candidate("collector-2")
	go c1.Run(ctx)
	first := <-terms // collector-1 leads before collector-2 starts
	go c2.Run(ctx)
	fmt.Println(first.who, "leads")

	if err := c1.Resign(ctx); err != nil { // e.g. at shutdown
		log.Fatal(err)
	}
	second := <-terms
	fmt.Println(second.who, "leads after", first.who, "resigned")
	fmt.Println("its token > the first term's:", second.token > first.token)
	leader, _ := c1.Leader(ctx)
	fmt.Println("the store names the leader:", leader.Identity)

	c2.Resign(ctx)
	c1.Close(ctx)
	c2.Close(ctx)
	// Output:
	// collector-1 leads
	// collector-2 leads after collector-1 resigned
	// its token > the first term's: true
	// the store names the leader: collector-2
}

// The health handler answers 200 while the candidate's term is healthy,
// and 503 when a term outlived its lease's deadline by more than the
// tolerance (something is stuck): a liveness probe restarts the process.
func ExampleCandidate_HealthHandler() {
	st, done := openExampleStore()
	defer done()
	leading := make(chan struct{})
	c, err := election.New(st, election.Config{
		Resource:         "report-mailer",
		OnStartedLeading: func(context.Context) { close(leading) },
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, leave := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { c.Run(ctx); close(ran) }()
	<-leading

	health := c.HealthHandler(5 * time.Second) // in a program: http.Handle("/healthz", health)
	rec := httptest.NewRecorder()
	health.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	fmt.Println(rec.Code, strings.TrimSpace(rec.Body.String()))

	leave()
	<-ran
	c.Close(context.Background())
	// Output:
	// 200 ok: leader
}

// Participant has the method set of Jaeger's election participant (Start,
// IsLeader, Close) and the option names of its constructor. Unlike
// Jaeger's, IsLeader turns false at the lease's deadline when renewals
// fail.
func ExampleParticipant() {
	st, done := openExampleStore()
	defer done()
	p, err := election.NewParticipant(st, "sampling-lock", election.ParticipantOptions{
		LeaderLeaseRefreshInterval:   5 * time.Second,  // how often the leader renews
		FollowerLeaseRefreshInterval: 60 * time.Second, // how often followers try; the lease's TTL
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Start(); err != nil {
		log.Fatal(err)
	}
	for !p.IsLeader() { // the only participant leads after its first attempt
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println("leader:", p.IsLeader())
	if err := p.Close(); err != nil { // releases the lease: the next leader takes over at once
		log.Fatal(err)
	}
	fmt.Println("leader after Close:", p.IsLeader())
	// Output:
	// leader: true
	// leader after Close: false
}
