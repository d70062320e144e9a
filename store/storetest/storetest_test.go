package storetest_test

import (
	"context"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

// TestRunWithAdvance runs the suite in its fake-clock mode (Config.Advance)
// on the memory store: expiries happen when the test moves the clock, and
// the field cases, which need real time, are skipped.
func TestRunWithAdvance(t *testing.T) {
	clock := clockwork.NewFakeClock()
	s, _ := memory.Open(context.Background(), memory.Config{Clock: clock})
	storetest.Run(t, storetest.Config{
		New:     func(t *testing.T) driver.Store { return s },
		Advance: clock.Advance,
	})
}
