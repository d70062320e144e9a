package memory_test

import (
	"testing"

	"github.com/tenure-go/tenure/clock"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

func TestConformanceFakeClock(t *testing.T) {
	fc := clock.NewFake()
	s := memory.New(memory.WithClock(fc))
	storetest.Run(t, storetest.Config{
		New:     func(t *testing.T) driver.Store { return s },
		Advance: fc.Advance,
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
