package memory_test

import (
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

func TestConformanceFakeClock(t *testing.T) {
	clock := clockwork.NewFakeClock()
	s := memory.New(memory.WithClock(clock))
	storetest.Run(t, storetest.Config{
		New:     func(t *testing.T) driver.Store { return s },
		Advance: clock.Advance,
	})
}

func TestConformanceRealClock(t *testing.T) {
	s := memory.New()
	storetest.Run(t, storetest.Config{New: func(t *testing.T) driver.Store { return s }})
}

func TestCases(t *testing.T) {
	s := memory.New()
	storetest.RunCases(t, storetest.Config{New: func(t *testing.T) driver.Store { return s }})
}
