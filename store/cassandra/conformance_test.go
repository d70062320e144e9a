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
		ShortTTL:    cassandra.MinTTL,
		ExpirySlack: time.Second,
		InvalidTTLs: invalidTTLs,
	}
}

func jaegerCfg(t *testing.T) storetest.Config {
	c := nativeCfg(t)
	c.New = func(t *testing.T) driver.Store {
		_, s := stores(t)
		return s
	}
	c.NoFencing = true
	return c
}

func TestConformanceNative(t *testing.T) { needSingle(t); storetest.Run(t, nativeCfg(t)) }
func TestConformanceJaeger(t *testing.T) { needSingle(t); storetest.Run(t, jaegerCfg(t)) }

// Field cases, native mode.

func TestCaseC01CleanShutdown(t *testing.T) {
	needSingle(t)
	storetest.CaseC01CleanShutdown(t, nativeCfg(t))
}
func TestCaseC02UnknownOutcome(t *testing.T) {
	needSingle(t)
	storetest.CaseC02UnknownOutcome(t, nativeCfg(t))
}
func TestCaseC03SubSecondTTL(t *testing.T) {
	needSingle(t)
	storetest.CaseC03SubSecondTTL(t, nativeCfg(t))
}
func TestCaseC04RenewalsFail(t *testing.T) {
	needSingle(t)
	storetest.CaseC04RenewalsFail(t, nativeCfg(t))
}
func TestCaseC05BlackHole(t *testing.T) { needSingle(t); storetest.CaseC05BlackHole(t, nativeCfg(t)) }
func TestCaseC06cPauseBeforeWrite(t *testing.T) {
	needSingle(t)
	storetest.CaseC06cPauseBeforeWrite(t, nativeCfg(t))
}
func TestCaseC07PartitionedHolderFencing(t *testing.T) {
	needSingle(t)
	storetest.CaseC07PartitionedHolderFencing(t, nativeCfg(t))
}
func TestCaseC08LateRenewal(t *testing.T) {
	needSingle(t)
	storetest.CaseC08LateRenewal(t, nativeCfg(t))
}
func TestCaseC10SameOwnerID(t *testing.T) {
	needSingle(t)
	storetest.CaseC10SameOwnerID(t, nativeCfg(t))
}

// Field cases, Jaeger-compatible mode (C07 needs fencing tokens, which this
// mode does not have; C09 concerns stores that tie locks to sessions).

func TestCaseC01CleanShutdownJaeger(t *testing.T) {
	needSingle(t)
	storetest.CaseC01CleanShutdown(t, jaegerCfg(t))
}
func TestCaseC02UnknownOutcomeJaeger(t *testing.T) {
	needSingle(t)
	storetest.CaseC02UnknownOutcome(t, jaegerCfg(t))
}
func TestCaseC03SubSecondTTLJaeger(t *testing.T) {
	needSingle(t)
	storetest.CaseC03SubSecondTTL(t, jaegerCfg(t))
}
func TestCaseC04RenewalsFailJaeger(t *testing.T) {
	needSingle(t)
	storetest.CaseC04RenewalsFail(t, jaegerCfg(t))
}
func TestCaseC05BlackHoleJaeger(t *testing.T) {
	needSingle(t)
	storetest.CaseC05BlackHole(t, jaegerCfg(t))
}
func TestCaseC06cPauseBeforeWriteJaeger(t *testing.T) {
	needSingle(t)
	storetest.CaseC06cPauseBeforeWrite(t, jaegerCfg(t))
}
func TestCaseC08LateRenewalJaeger(t *testing.T) {
	needSingle(t)
	storetest.CaseC08LateRenewal(t, jaegerCfg(t))
}
func TestCaseC10SameOwnerIDJaeger(t *testing.T) {
	needSingle(t)
	storetest.CaseC10SameOwnerID(t, jaegerCfg(t))
}
