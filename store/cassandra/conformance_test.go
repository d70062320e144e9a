package cassandra_test

import (
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/cassandra"
	"github.com/tenure-go/tenure/store/storetest"
)

// invalidTTLs are TTLs the store must reject before any I/O: below one
// second (Cassandra's TTLs are whole seconds, and TTL 0 means never
// expires), and above what Cassandra can store once the store's extra
// second is added.
var invalidTTLs = []time.Duration{
	500 * time.Millisecond,
	999 * time.Millisecond,
	630720000 * time.Second,
	630720001 * time.Second,
}

// The suite's ShortTTL is the smallest TTL the store accepts; the store
// writes 2 s for it (StoreTTL), and Cassandra expires it 1 to 2 s after the
// write: ExpirySlack is that one second.
func nativeCfg(t *testing.T) storetest.Config {
	return storetest.Config{
		New: func(t *testing.T) driver.Store {
			s, _ := stores(t)
			return s
		},
		Fresh:       func(t *testing.T) driver.Store { return openStore(t, cassandra.ModeNative, nil) },
		Reopen:      func(t *testing.T, _ driver.Store) driver.Store { return openStore(t, cassandra.ModeNative, nil) },
		ShortTTL:    cassandra.MinTTL,
		ExpirySlack: time.Second,
		InvalidTTLs: invalidTTLs,
		// A hold is written with the store TTL, ceil(TTL) + 1 s (StoreTTL),
		// which Cassandra expires up to a second early: it ends within a
		// second after the time asked for a whole number of seconds.
		HoldResolution: time.Second,
	}
}

func jaegerCfg(t *testing.T) storetest.Config {
	c := nativeCfg(t)
	c.New = func(t *testing.T) driver.Store {
		_, s := stores(t)
		return s
	}
	c.Fresh = func(t *testing.T) driver.Store { return openStore(t, cassandra.ModeJaeger, nil) }
	c.Reopen = func(t *testing.T, _ driver.Store) driver.Store { return openStore(t, cassandra.ModeJaeger, nil) }
	c.NoFencing = true
	c.Skip = map[string]string{"ReservedForWaiter": "Jaeger mode keeps no reservations: its table is Jaeger's"}
	return c
}

// TestConformanceNative and TestConformanceJaeger run the conformance
// tests and the field cases on each mode (C07 needs fencing tokens, which
// the Jaeger-compatible mode does not have; C09 is the Cassandra tests' own).
func TestConformanceNative(t *testing.T) { needSingle(t); storetest.Run(t, nativeCfg(t)) }
func TestConformanceJaeger(t *testing.T) { needSingle(t); storetest.Run(t, jaegerCfg(t)) }
