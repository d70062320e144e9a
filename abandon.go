package tenure

// Abandon ends the lease locally without freeing it in the store: its
// context is cancelled (cause ErrReleased), renewal stops, and the Locker
// forgets it (Close does not release it), but no store call is made, so
// the store keeps the lease until its TTL runs out after the last renewal
// the store applied. It is for a holder that must not free the resource
// yet, because work that the lease guards may still run, and that will not
// renew it any longer: package election gives up a term so when
// OnStartedLeading has not returned within Config.HandOverTimeout. It
// returns an error wrapping the loss's *LostError (errors.Is ErrLeaseLost)
// when the lease had already been lost, and one wrapping ErrReleased when
// it had already been released or abandoned. It is safe for concurrent use.
func (l *Lease) Abandon() error {
	if _, err := l.end("abandon"); err != nil {
		return err
	}
	// end counted a store call to come (a release); there is none.
	l.lk.done()
	return nil
}
