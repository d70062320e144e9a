package tenure

import (
	"testing"

	"github.com/tenure-go/tenure/internal/naming"
)

// The limits that users read in this package are the ones that
// internal/naming enforces.
func TestLimitsMatchNaming(t *testing.T) {
	if MaxSlots != naming.MaxSlots {
		t.Errorf("MaxSlots %d, naming.MaxSlots %d", MaxSlots, naming.MaxSlots)
	}
	if MaxOwnerIDLen != naming.MaxOwnerIDLen {
		t.Errorf("MaxOwnerIDLen %d, naming.MaxOwnerIDLen %d", MaxOwnerIDLen, naming.MaxOwnerIDLen)
	}
}
