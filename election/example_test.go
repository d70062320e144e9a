package election_test

import (
	"context"
	"fmt"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/store/memory"
)

// A candidate does its work while it leads, with the term's context and
// fencing token, and leaves when its context ends, releasing the lease.
func ExampleCandidate() {
	store := memory.New() // store/sqlite on one host, store/cassandra across hosts
	ctx, leave := context.WithCancel(context.Background())
	done := make(chan struct{})

	var c *election.Candidate
	c, err := election.New(store, election.Config{
		Resource:    "sampling-calculator",
		Identity:    "collector-1",
		TTL:         15 * time.Second,
		RetryPeriod: 2 * time.Second,
		OnStartedLeading: func(term context.Context) {
			// The term's lease, for its fencing token.
			lease := tenure.LeaseFromContext(term)
			fmt.Println("leading with token", lease.Token())
			leave() // here: work until <-term.Done(), passing lease.Token() along
		},
		OnStoppedLeading: func() { fmt.Println("stopped leading"); close(done) },
		OnNewLeader:      func(id string) { fmt.Println("leader:", id) },
	})
	if err != nil {
		panic(err)
	}
	err = c.Run(ctx) // campaigns until ctx ends; the lease is released then
	<-done
	fmt.Println("Run:", err)
	// Output:
	// leader: collector-1
	// leading with token 1
	// stopped leading
	// Run: context canceled
}
