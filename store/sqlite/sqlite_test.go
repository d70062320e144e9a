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
func open(t *testing.T) (*sqlite.Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "leases.db")
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func reopen(t *testing.T, cfg sqlite.Config) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), cfg)
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
	Reopen: func(t *testing.T, s driver.Store) driver.Store {
		return reopen(t, sqlite.Config{Path: s.(*sqlite.Store).Path()})
	},
}

func TestConformance(t *testing.T) { storetest.Run(t, cfg) }

// TestConformanceTwoHandles runs the suite with every test's store made of
// two handles on one file, used alternately, as two processes would.
func TestConformanceTwoHandles(t *testing.T) {
	storetest.Run(t, storetest.Config{New: func(t *testing.T) driver.Store {
		s, path := open(t)
		return &alternating{stores: []driver.Store{s, reopen(t, sqlite.Config{Path: path})}}
	}})
}
