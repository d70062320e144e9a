package etcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrUnsafeServer means that an etcd member runs a server release with a
// known bug that lets a lease's keys be deleted while a keep-alive of it is
// confirmed, or a keep-alive be confirmed for a lease already gone: two
// holders could then trust one resource. Open returns an error wrapping it
// (with the member and its version) unless Config.AllowUnsafeServer is set.
//
// The bugs (etcd's own issue tracker):
//   - etcd-io/etcd#15247: a leader that was paused or starved (a stopped VM,
//     a long fsync, a full CPU) still believes it leads when it runs again,
//     answers keep-alives, and proposes the revocation of every lease it
//     thinks expired meanwhile; the proposal is forwarded to the new leader
//     and applied, deleting the keys of leases that were kept alive. Fixed
//     by checking leadership before renewing and revoking (etcd PR #16822),
//     in 3.5.13 and every 3.6.
//   - etcd-io/etcd#20547: a renewal that races the revocation of the lease
//     is answered with the TTL although the lease is gone. Fixed in 3.5.23
//     and 3.6.5 (etcd PRs #20616, #20615).
//
// tenure's harness saw the first one on etcd 3.4.23 (Debian's package), on a
// three-member cluster whose leader was stopped for 3.3 s: a key granted and
// confirmed by a keep-alive was deleted 16 ms later and granted to another
// holder (scripts/safety-ci, seed 3670411738911098).
var ErrUnsafeServer = errors.New("etcd server release with known lease-safety bugs")

// serverSafe reports whether an etcd server version ("3.6.16") has the fixes
// ErrUnsafeServer lists: 3.5.23 or later 3.5, 3.6.5 or later 3.6, or 3.7 and
// later. Every 3.4 and older release is unsafe here, even those with some
// backports, and so is a version string that does not parse.
func serverSafe(version string) bool {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 3 {
		return false
	}
	num := func(s string) int {
		end := 0
		for end < len(s) && s[end] >= '0' && s[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(s[:end])
		if err != nil {
			return -1
		}
		return n
	}
	major, minor, patch := num(parts[0]), num(parts[1]), num(parts[2])
	switch {
	case major < 0 || minor < 0 || patch < 0:
		return false
	case major != 3:
		return major > 3
	case minor == 5:
		return patch >= 23
	case minor == 6:
		return patch >= 5
	}
	return minor > 6
}

// checkServers asks every endpoint for its status and returns an error
// wrapping ErrUnsafeServer when a member that answers runs an unsafe
// release. Endpoints that do not answer within ctx are not checked (Open
// already read through the cluster); an answer that carries no version is
// unsafe.
func checkServers(ctx context.Context, cli *clientv3.Client, endpoints []string) error {
	type answer struct {
		ep, version string
		err         error
	}
	answers := make([]answer, len(endpoints))
	var wg sync.WaitGroup
	for i, ep := range endpoints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := cli.Status(ctx, ep)
			answers[i] = answer{ep: ep, err: err}
			if err == nil {
				answers[i].version = st.Version
			}
		}()
	}
	wg.Wait()
	for _, a := range answers {
		if a.err != nil || serverSafe(a.version) {
			continue
		}
		return fmt.Errorf("etcd store: member %s runs etcd %q: %w (etcd-io/etcd#15247, #20547: a paused leader's revocations and racing renewals can delete a held lease's key while its keep-alive is confirmed); run etcd 3.5.23+, 3.6.5+ or later, or set allow_unsafe_server=true (Config.AllowUnsafeServer) to accept the risk",
			a.ep, printable(a.version), ErrUnsafeServer)
	}
	return nil
}

// printable returns s with any byte outside printable ASCII replaced, and at
// most 32 bytes of it: a version string comes from another host.
func printable(s string) string {
	if len(s) > 32 {
		s = s[:32]
	}
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}
