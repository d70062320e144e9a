package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/sqlite"
	"github.com/tenure-go/tenure/store/storetest"
)

// open returns a store on a file in a fresh temporary directory, and a
// function that opens another handle on the same file (as another process
// would).
func open(t *testing.T, opts ...sqlite.Option) (*sqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leases.db")
	s, err := sqlite.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func reopen(t *testing.T, path string, opts ...sqlite.Option) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var cfg = storetest.Config{
	New: func(t *testing.T) driver.Store {
		s, _ := open(t)
		return s
	},
}

func TestConformance(t *testing.T) { storetest.Run(t, cfg) }

// TestConformanceTwoHandles runs the suite with every test's store made of
// two handles on one file, used alternately, as two processes would.
func TestConformanceTwoHandles(t *testing.T) {
	storetest.Run(t, storetest.Config{New: func(t *testing.T) driver.Store {
		s, path := open(t)
		return &alternating{stores: []driver.Store{s, reopen(t, path)}}
	}})
}

func TestCaseC01CleanShutdown(t *testing.T)     { storetest.CaseC01CleanShutdown(t, cfg) }
func TestCaseC02UnknownOutcome(t *testing.T)    { storetest.CaseC02UnknownOutcome(t, cfg) }
func TestCaseC03SubSecondTTL(t *testing.T)      { storetest.CaseC03SubSecondTTL(t, cfg) }
func TestCaseC04RenewalsFail(t *testing.T)      { storetest.CaseC04RenewalsFail(t, cfg) }
func TestCaseC05BlackHole(t *testing.T)         { storetest.CaseC05BlackHole(t, cfg) }
func TestCaseC06cPauseBeforeWrite(t *testing.T) { storetest.CaseC06cPauseBeforeWrite(t, cfg) }
func TestCaseC07PartitionedHolderFencing(t *testing.T) {
	storetest.CaseC07PartitionedHolderFencing(t, cfg)
}
func TestCaseC08LateRenewal(t *testing.T) { storetest.CaseC08LateRenewal(t, cfg) }
func TestCaseC10SameOwnerID(t *testing.T) { storetest.CaseC10SameOwnerID(t, cfg) }
