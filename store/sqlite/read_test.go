package sqlite_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/store/sqlite"
)

// hookedClock is a host clock shared by the Stores of a test that runs a
// function (once) inside one Store's next reading of it, before or after
// the reading: a write that another process commits between that Store's
// clock reading and its query, or between its query and the next reading.
type hookedClock struct {
	c         *fakeHostClock
	pre, post atomic.Pointer[func()]
}

func (h *hookedClock) read() (string, time.Duration, error) {
	if f := h.pre.Swap(nil); f != nil {
		(*f)()
	}
	epoch, now, err := h.c.read()
	if f := h.post.Swap(nil); f != nil {
		(*f)()
	}
	return epoch, now, err
}

// after runs f right after the next reading; before right before it.
func (h *hookedClock) after(f func())  { h.post.Store(&f) }
func (h *hookedClock) before(f func()) { h.pre.Store(&f) }

// A renewal that another process commits while a Get or List is reading
// never makes the live lease look free: the reader saw the row written at
// a later instant of the shared clock than its own reading before the
// query (seen by the harness: "not held" in the middle of a live lease).
func TestReadRacingRenewalSeesTheLease(t *testing.T) {
	ctx := context.Background()
	_, path := open(t)
	clock := newFakeHostClock()
	reader := &hookedClock{c: clock}
	w := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, clock.read, nil))
	r := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, reader.read, nil))
	rec, err := w.Acquire(ctx, "race", "a#1.1", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	renewInside := func() {
		// The reader has read the clock; the writer renews 500 ms later.
		clock.now.Add(int64(500 * time.Millisecond))
		if err := w.Renew(ctx, "race", "a#1.1", rec.Token, 10*time.Second); err != nil {
			t.Error(err)
		}
	}
	reader.after(renewInside)
	got, err := r.Get(ctx, "race")
	if err != nil || got.Owner != "a#1.1" {
		t.Fatalf("Get while a renewal commits: %+v, %v; want the holder a#1.1", got, err)
	}
	reader.after(renewInside)
	list, err := r.List(ctx, "")
	if err != nil || len(list) != 1 || list[0].Owner != "a#1.1" {
		t.Fatalf("List while a renewal commits: %+v, %v; want the holder a#1.1", list, err)
	}
}

// A lease whose expiry falls between the reader's clock readings before
// and after its query, renewed meanwhile, is read again rather than
// reported free: it was live until its renewal, and live after it. (A
// reader that read the clock only after its query would report it free.)
func TestReadAtExpiryRenewedMeanwhileSeesTheLease(t *testing.T) {
	ctx := context.Background()
	_, path := open(t)
	clock := newFakeHostClock()
	reader := &hookedClock{c: clock}
	w := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, clock.read, nil))
	r := reopen(t, sqlite.WithClocks(sqlite.Config{Path: path}, reader.read, nil))
	reads := []struct {
		name string
		read func(resource string) error
	}{
		{"Get", func(resource string) error { _, err := r.Get(ctx, resource); return err }},
		{"List", func(resource string) error {
			l, err := r.List(ctx, resource)
			if err == nil && len(l) != 1 {
				return driver.ErrNotHeld
			}
			return err
		}},
	}
	for _, rd := range reads {
		name, read := rd.name, rd.read
		rec, err := w.Acquire(ctx, name, "a#1.1", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// The reader reads the clock 2 ms before the expiry, and its query
		// sees the row; then the holder renews 1 ms before the expiry and
		// the clock moves past the expiry before the reader's next reading.
		clock.now.Add(int64(time.Second - 2*time.Millisecond))
		reader.after(func() {
			reader.before(func() {
				clock.now.Add(int64(time.Millisecond))
				if err := w.Renew(ctx, name, "a#1.1", rec.Token, time.Second); err != nil {
					t.Error(err)
				}
				clock.now.Add(int64(4 * time.Millisecond))
			})
		})
		if err := read(name); err != nil {
			t.Fatalf("%s across the expiry of a lease renewed meanwhile: %v; want the holder", name, err)
		}
		reader.pre.Store(nil)
		reader.post.Store(nil)
	}
}
