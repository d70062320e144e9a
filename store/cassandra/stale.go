package cassandra

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/faultinject"
)

func init() { faultinject.CassandraStaleRenewal = staleRenewal }

// staleRenewal implements faultinject.CassandraStaleRenewal: the renew
// statement for the row's holder, with write id one below the row's (a
// write made before the row's last one) and CQL v5's now_in_seconds set
// so that the owner cell would expire about left from now.
func staleRenewal(ctx context.Context, ds driver.Store, resource string, left time.Duration) (bool, string, error) {
	s, ok := ds.(*Store)
	if !ok || s.cfg.Mode != ModeNative {
		return false, "", errors.New("cassandra store: stale renewals need a native-mode Store")
	}
	cur, err := s.read(ctx, resource)
	if err != nil {
		return false, "", err
	}
	if !cur.hasOwner || cur.token == 0 || cur.ttlMs <= 0 {
		return false, "no lease", nil
	}
	ttl := time.Duration(cur.ttlMs) * time.Millisecond
	secs, err := StoreTTL(ttl)
	if err != nil {
		return false, "", err
	}
	started := int(time.Now().Add(left).Unix()) - secs
	wid := cur.writeID - 1
	m := newRowMap()
	applied, err := s.session.Query(s.st.renew, secs, cur.owner, cur.ttlMs, wid, resource, cur.owner, int64(cur.token), wid).
		Consistency(s.cfg.CommitConsistency).
		SerialConsistency(s.cfg.SerialConsistency).
		WithNowInSeconds(started).
		MapScanCASContext(ctx, m)
	if err != nil {
		return false, "", fmt.Errorf("cassandra store: stale renewal of %q: %w", resource, err)
	}
	return applied, fmt.Sprintf("token %d, started %d s ago", cur.token, int(time.Now().Unix())-started), nil
}
