package kubernetes

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tenure-go/tenure/driver"
)

// lease is what tenure reads from a Lease object.
type lease struct {
	obj *coordinationv1.Lease
	// holder is spec.holderIdentity ("" when released or never held).
	holder string
	// dur is spec.leaseDurationSeconds; 0 when absent or not positive.
	dur time.Duration
	// token and tokenOwner come from AnnotationGrant: the last tenure
	// grant's fencing token, and the owner string that holds it ("" once
	// released). token is 0 when the annotation is absent or malformed.
	token      uint64
	tokenOwner string
	// rv is the object's resourceVersion.
	rv string
}

func parseLease(obj *coordinationv1.Lease) lease {
	l := lease{obj: obj, rv: obj.ResourceVersion}
	if h := obj.Spec.HolderIdentity; h != nil {
		l.holder = *h
	}
	if d := obj.Spec.LeaseDurationSeconds; d != nil && *d > 0 {
		l.dur = time.Duration(*d) * time.Second
	}
	if v, ok := obj.Annotations[AnnotationGrant]; ok {
		tok, owner, _ := strings.Cut(v, " ")
		if t, err := strconv.ParseUint(tok, 10, 64); err == nil && t > 0 {
			l.token, l.tokenOwner = t, owner
		}
	}
	return l
}

// held reports whether the record names a holder.
func (l lease) held() bool { return l.holder != "" }

// grantOf reports whether the record is the live lease of the grant (owner,
// token): the holder and the grant annotation both name owner, with token.
func (l lease) grantOf(owner string, token uint64) bool {
	return l.holder == owner && l.tokenOwner == owner && l.token == token && token != 0
}

// ours reports whether owner holds the record as a tenure grant (any
// token): a retry of the same grant, or a semaphore's marker, whose owner
// string every holder shares.
func (l lease) ours(owner string) bool {
	return l.holder == owner && l.tokenOwner == owner && l.token != 0
}

// holderToken is the holder's fencing token where the holder is a tenure
// grant, and 0 for a holder tenure did not grant (client-go's leader
// election, which keeps the last tenure grant's annotation as it was).
func (l lease) holderToken() uint64 {
	if l.holder != "" && l.tokenOwner == l.holder {
		return l.token
	}
	return 0
}

// record is the driver.Record of a held lease, with remaining as the
// observer reckons it.
func (l lease) record(resource string, remaining time.Duration) driver.Record {
	return driver.Record{Resource: resource, Owner: l.holder, Token: l.holderToken(), TTL: l.dur, Remaining: max(0, remaining)}
}

// seconds returns ttl in whole seconds, rounded up: the store keeps a lease
// at least as long as asked.
func seconds(ttl time.Duration) int32 {
	return int32((ttl + time.Second - 1) / time.Second)
}

func ptr[T any](v T) *T { return &v }

// grantSpec sets obj's spec and annotations for a new grant of resource to
// owner with token, as client-go's leader election writes an acquisition:
// holderIdentity, leaseDurationSeconds in whole seconds, acquireTime and
// renewTime now, leaseTransitions one more than before (0 on a new object).
func grantSpec(obj *coordinationv1.Lease, resource, owner string, token uint64, ttl time.Duration, now time.Time, existed bool) {
	transitions := int32(0)
	if existed && obj.Spec.LeaseTransitions != nil {
		transitions = *obj.Spec.LeaseTransitions + 1
	}
	t := metav1.NewMicroTime(now)
	obj.Spec.HolderIdentity = ptr(owner)
	obj.Spec.LeaseDurationSeconds = ptr(seconds(ttl))
	obj.Spec.AcquireTime = &t
	obj.Spec.RenewTime = ptr(t)
	obj.Spec.LeaseTransitions = ptr(transitions)
	setAnnotation(obj, AnnotationGrant, fmt.Sprintf("%d %s", token, owner))
	if name, literal := leaseName(resource); !literal || name != resource {
		setAnnotation(obj, AnnotationResource, resource)
	}
}

// maxDurationBump is how many seconds above the requested TTL a renewal may
// write leaseDurationSeconds (see renewSpec).
const maxDurationBump = 2

// renewSpec sets obj's spec for a renewal by its holder, with ttl, at now.
//
// client-go's leader election tells a renewal from no change by comparing
// the JSON of the record it read last with the one it reads now, in which
// acquireTime and renewTime are whole seconds (metav1.Time): two writes in
// the same second with the same leaseDurationSeconds look the same to it,
// and it counts the holder's lease from the first. So every renewal writes
// a (renewTime second, leaseDurationSeconds) pair that is greater than the
// one before it, in that order: renewTime is now when now is in a later
// second than the last renewTime; otherwise the same second with
// leaseDurationSeconds one more than before (at most maxDurationBump above
// the TTL, in whole seconds); otherwise the second after the last
// renewTime. No pair repeats, so no observer takes a renewal for the record
// it saw before. renewTime runs ahead of the clock only while renewals come
// more often than three a second, or after the holder's wall clock was set
// back; leaseDurationSeconds is at most maxDurationBump seconds more than
// the TTL, which only makes observers wait longer.
func renewSpec(obj *coordinationv1.Lease, ttl time.Duration, now time.Time) {
	base := seconds(ttl)
	prevDur := int32(0)
	if obj.Spec.LeaseDurationSeconds != nil {
		prevDur = *obj.Spec.LeaseDurationSeconds
	}
	renew, dur := now, base
	if prev := obj.Spec.RenewTime; prev != nil {
		prevSec := prev.Time.Truncate(time.Second)
		switch {
		case now.Truncate(time.Second).After(prevSec):
			// A later second: a new pair.
		case max(prevDur+1, base) <= base+maxDurationBump:
			renew, dur = latest(prev.Time, now, prevSec), max(prevDur+1, base)
		default:
			renew = prevSec.Add(time.Second)
		}
	}
	t := metav1.NewMicroTime(renew)
	obj.Spec.RenewTime = &t
	obj.Spec.LeaseDurationSeconds = ptr(dur)
}

// latest returns the later of a and b, within the second that starts at
// sec (b may be earlier when the wall clock was set back).
func latest(a, b, sec time.Time) time.Time {
	if b.After(a) && b.Truncate(time.Second).Equal(sec) {
		return b
	}
	return a
}

// releaseSpec sets obj's spec as client-go's leader election releases a
// lease: no holder, leaseDurationSeconds 1, acquireTime and renewTime now,
// leaseTransitions kept; the grant annotation keeps the token alone.
func releaseSpec(obj *coordinationv1.Lease, token uint64, now time.Time) {
	t := metav1.NewMicroTime(now)
	obj.Spec.HolderIdentity = ptr("")
	obj.Spec.LeaseDurationSeconds = ptr(int32(1))
	obj.Spec.AcquireTime = &t
	obj.Spec.RenewTime = ptr(t)
	setAnnotation(obj, AnnotationGrant, strconv.FormatUint(token, 10))
}

// keepSpec hands the lease to keeper with the same token for ttl.
func keepSpec(obj *coordinationv1.Lease, keeper string, token uint64, ttl time.Duration, now time.Time) {
	t := metav1.NewMicroTime(now)
	obj.Spec.HolderIdentity = ptr(keeper)
	obj.Spec.LeaseDurationSeconds = ptr(seconds(ttl))
	obj.Spec.RenewTime = &t
	setAnnotation(obj, AnnotationGrant, fmt.Sprintf("%d %s", token, keeper))
}

func setAnnotation(obj *coordinationv1.Lease, k, v string) {
	if obj.Annotations == nil {
		obj.Annotations = map[string]string{}
	}
	obj.Annotations[k] = v
}
