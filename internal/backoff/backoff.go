// Package backoff computes retry delays: capped exponential backoff with
// full jitter, as described in "Exponential Backoff And Jitter" (Marc
// Brooker, AWS Architecture Blog, 2015): each delay is drawn uniformly from
// [0, min(cap, base·2^attempt)], so that many waiters do not retry in step.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a capped exponential backoff with full jitter.
type Policy struct {
	// Base is the upper bound of the first delay.
	Base time.Duration
	// Cap is the largest delay.
	Cap time.Duration
}

// Ceiling returns the upper bound of the delay before retry number attempt
// (0 for the first retry): min(Cap, Base·2^attempt).
func (p Policy) Ceiling(attempt int) time.Duration {
	if p.Base <= 0 {
		return 0
	}
	c := p.Base
	for i := 0; i < attempt && c < p.Cap; i++ {
		c *= 2
	}
	if p.Cap > 0 && c > p.Cap {
		c = p.Cap
	}
	return c
}

// Delay returns a delay drawn uniformly from [0, Ceiling(attempt)].
// It is safe for concurrent use.
func (p Policy) Delay(attempt int) time.Duration {
	c := p.Ceiling(attempt)
	if c <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(c) + 1))
}

// Passed spreads the writes of one lease that pass each other: handles
// that write one lease under an owner string they share (every holder of a
// semaphore renews its marker with an acquire), each conditioned on the
// write it read, lose to one another when they retry in step. After the
// n-th loss (from 0) a store waits Passed.Delay(n): below 4 ms, doubled at
// each loss, at most 200 ms.
var Passed = Policy{Base: 4 * time.Millisecond, Cap: 200 * time.Millisecond}

// Wait sleeps for Delay(attempt), or until ctx ends; then it returns ctx's
// cause.
func (p Policy) Wait(ctx context.Context, attempt int) error {
	t := time.NewTimer(p.Delay(attempt))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
