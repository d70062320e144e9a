// Package backoff computes retry delays: capped exponential backoff with
// full jitter, as described in "Exponential Backoff And Jitter" (Marc
// Brooker, AWS Architecture Blog, 2015): each delay is drawn uniformly from
// [0, min(cap, base·2^attempt)], so that many waiters do not retry in step.
package backoff

import (
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
