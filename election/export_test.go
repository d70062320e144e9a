package election

import "github.com/tenure-go/tenure/internal/naming"

// For the tests of package election_test: how a candidate's identity and
// value are kept in, and read back from, its owner strings.
var (
	LeaderOf      = leaderOf
	ParseOwner    = naming.ParseCandidate
	ValidateValue = naming.ValidateValue
)

// ValidateIdentity checks an identity and value as New does.
func ValidateIdentity(identity, value string) error {
	_, err := lockerID(identity, value)
	return err
}
