package tenure

// Abandon ends the lease locally without freeing it in the store: its
// context is cancelled (cause ErrReleased), renewal stops, and the Locker
// forgets it (Close does not release it), but no store call is made, so
// the store keeps the lease until its TTL runs out after the last renewal
// the store applied. It is for a holder that must not free the resource
// yet, because work that the lease guards may still run, and that will not
// renew it any longer: package election gives up a term so when
// OnStartedLeading has not returned within Config.HandOverTimeout. It
// returns an error wrapping ErrLeaseLost when the lease had already been
// lost, released or abandoned. It is safe for concurrent use.
func (l *Lease) Abandon() error {
	if _, err := l.end("abandon"); err != nil {
		return err
	}
	// end counts a release to come (for Locker.Close to wait for); an
	// abandoned lease makes none.
	l.lk.done()
	return nil
}
