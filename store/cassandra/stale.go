package cassandra

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/internal/faultinject"
)

func init() { faultinject.CassandraLateRenewal = lateRenewal }

// lateRenewal implements faultinject.CassandraLateRenewal: it reads the
// row, and returns the renew statement casRenew would send now for its
// holder on a host whose clock is skew ahead, to be sent later with CQL
// v5's now_in_seconds of now.
func lateRenewal(ctx context.Context, ds driver.Store, resource string, skew time.Duration) (func(context.Context) (bool, string, error), error) {
	s, ok := ds.(*Store)
	if !ok || s.cfg.Mode != ModeNative {
		return nil, errors.New("cassandra store: late renewals need a native-mode Store")
	}
	cur, err := s.read(ctx, resource)
	if err != nil {
		return nil, err
	}
	if !cur.hasOwner || cur.token == 0 || cur.ttlMs <= 0 {
		return nil, nil
	}
	ttl := time.Duration(cur.ttlMs) * time.Millisecond
	secs, err := StoreTTL(ttl)
	if err != nil {
		return nil, err
	}
	built := time.Now()
	wid := built.Add(skew).UnixMicro()
	args := renewArgs(secs, cur.owner, cur.ttlMs, wid, resource, cur.owner, cur.token, cur.writeIDCell)
	return func(ctx context.Context) (bool, string, error) {
		m := newRowMap()
		applied, err := s.session.Query(s.st.renew, args...).
			Consistency(s.cfg.CommitConsistency).
			SerialConsistency(s.cfg.SerialConsistency).
			WithNowInSeconds(int(built.Unix())).
			MapScanCASContext(ctx, m)
		if err != nil {
			return false, "", fmt.Errorf("cassandra store: late renewal of %q: %w", resource, err)
		}
		return applied, fmt.Sprintf("token %d, built %v ago on a clock %v ahead", cur.token, time.Since(built).Round(time.Millisecond), skew), nil
	}, nil
}
