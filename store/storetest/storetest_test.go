package storetest_test

import (
	"context"
	"testing"

	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

// TestRunWithAdvance runs the suite in its fake-clock mode (Config.Advance)
// on the memory store: expiries happen when the test moves the clock, and
// the field cases, which need real time, are skipped.
func TestRunWithAdvance(t *testing.T) {
	fc := clock.NewFake()
	s, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	storetest.Run(t, storetest.Config{
		New:     func(t *testing.T) driver.Store { return s },
		Fresh:   func(t *testing.T) driver.Store { return memory.New() },
		Advance: fc.Advance,
	})
}
