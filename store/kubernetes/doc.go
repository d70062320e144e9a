// Package kubernetes is a tenure store on the coordination.k8s.io/v1 Lease
// objects of a Kubernetes namespace, through k8s.io/client-go v0.37.2,
// tested against kube-apiserver v1.37.2 (scripts/kube-apiserver). It is a
// Go module of its own, so that programs that do not use it do not build
// client-go; importing it registers the kubernetes: and k8s: URL schemes
// with package store. docs/store-kubernetes.md is its manual.
//
// # Leases
//
// A resource is one Lease object (see LeaseName), written the way
// client-go's leader election (resourcelock.LeaseLock) writes it:
// spec.holderIdentity is the grant's owner string, leaseDurationSeconds
// the TTL in whole seconds (rounded up; a TTL below one second is
// ErrInvalidTTL), acquireTime and renewTime the holder's wall clock,
// leaseTransitions counts changes of holder, and a release clears the
// holder. So a tenure candidate and a client-go candidate on the same Lease
// exclude each other.
//
// # Expiry without a server clock
//
// The API server never expires a Lease, and its renewTime comes from the
// holder's clock, which may be skewed. As in client-go, a lease ends for a
// Store when the Store has seen the Lease's resourceVersion unchanged for
// its leaseDurationSeconds on its own clock (CLOCK_BOOTTIME); only then may
// it take the Lease over, with an update conditioned on that
// resourceVersion. A new Store has seen nothing, so it waits a whole
// duration from its first look; a Store that waits for a resource watches
// the namespace, so it sees each renewal as it happens. The holder's local
// deadline (tSend + TTL·(1−ρ), kept by tenure's Locker) comes before any
// observer's take-over: every observation is taken after the write it saw,
// which the holder sent after its tSend.
//
// # Fencing tokens
//
// A grant's token is max(T+1, R+1), where T is the token the Lease's
// AnnotationGrant kept from the last tenure grant (absent on a new object)
// and R is the resourceVersion of the state the grant replaces: the
// object's, read before the conditional update, or, for a new object, the
// resourceVersion of a consistent list made after the object was found
// missing. The token is written in the same update as the grant. Resource
// versions of an etcd-backed API server are etcd's revision, which grows
// with every write to the cluster and is never reused (Kubernetes
// documents them as comparable integers), and every earlier grant's token
// is at most the resourceVersion of its own write: so R+1 is above every
// earlier token of the resource, also after the Lease was deleted and
// created again (the deletion's revision is above the last grant's, and
// the list after it is above the deletion). What tokens do not survive:
// restoring etcd from a backup without moving its revision forward
// (etcdutl snapshot restore --bump-revision, which Kubernetes' restore
// procedure uses), while the Lease object is gone too.
//
// # Operations
//
// Acquire reads the Lease (one GET) and, when it is free, writes it (one
// PUT conditioned on the resourceVersion read, or a POST for a new object
// after a list); a retry of the same grant (the same owner string, with
// its token annotation) renews it. Renew, Release and Keep are one PUT each,
// conditioned on the resourceVersion of this Store's last write of the
// grant; when that fails, the Store reads the Lease and decides from its
// holder and token annotation whether the grant still holds it (then it
// writes again) or is lost (driver.NotHolder, naming the holder). A write
// whose answer was lost (a timeout, a broken connection, an API server
// that timed out inside) is an unknown outcome, resolved by the next
// call's read of the holder; never guessed. There is no batch renewal: the
// API has no multi-object write.
package kubernetes
