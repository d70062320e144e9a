package tenure

import "github.com/tenure-go/tenure/internal/naming"

// MaxOwnerIDLen is the longest readable owner id (WithOwnerID), in bytes.
const MaxOwnerIDLen = naming.MaxOwnerIDLen

// DefaultOwnerID returns the readable owner id that a Locker has unless
// WithOwnerID sets another: "HOST:PID", the host name (at most
// MaxOwnerIDLen−12 bytes of it) and the process id.
func DefaultOwnerID() string { return naming.DefaultOwnerID() }

// OwnerID returns the readable id (WithOwnerID) of an owner string as a
// store reports it (Record.Owner, HeldError's Holder.Owner, Lease.Owner):
// tenure writes "ID#NONCE.N" (the Locker's id, a random nonce, the number
// of the grant), and OwnerID returns the part before the last "#". An owner
// string without "#" (written by another program, such as a Jaeger
// collector) is returned whole. The string comes from another process:
// print it escaped.
func OwnerID(owner string) string { return naming.OwnerID(owner) }
