package memory_test

import (
	"testing"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

// TestConformance is the store's whole conformance test: every test of the
// lease contract and every field case, on one store shared by the subtests
// (each uses resource names of its own).
func TestConformance(t *testing.T) {
	s := memory.New()
	storetest.Run(t, storetest.Config{
		New:   func(t *testing.T) driver.Store { return s },
		Fresh: func(t *testing.T) driver.Store { return memory.New() },
	})
}
