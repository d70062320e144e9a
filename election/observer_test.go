package election_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/clock"
	"github.com/tenure-go/tenure/driver"
	"github.com/tenure-go/tenure/election"
	"github.com/tenure-go/tenure/store/memory"
	"github.com/tenure-go/tenure/store/storetest"
)

// describe is an observation as the tests compare them.
func describe(l election.Leader) string {
	if l.Owner == "" {
		return "none"
	}
	return fmt.Sprintf("%s(%s)#%d", l.Identity, l.Value, l.Token)
}

// next receives the next observation.
func next(t *testing.T, ch <-chan election.Leader) string {
	t.Helper()
	return describe(recv(t, ch, "an observation"))
}

func newObserver(t *testing.T, s driver.Store, cfg election.ObserverConfig) *election.Observer {
	t.Helper()
	o, err := election.NewObserver(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// The observer reports the current state first, and a release through the
// store's release notification, long before its next poll.
func TestObserverSeesReleasesThroughNotifications(t *testing.T) {
	mem := memory.New()
	ctx := ctxT(t)
	la, err := mustLocker(t, mem, "a").TryAcquire(ctx, "e", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	o := newObserver(t, mem, election.ObserverConfig{Resource: "e", PollInterval: time.Hour})
	ch := o.Observe(ctx)
	if got := next(t, ch); got != fmt.Sprintf("a()#%d", la.Token()) {
		t.Fatalf("first observation %s; want a's term", got)
	}
	la.Release(ctx)
	if got := next(t, ch); got != "none" {
		t.Fatalf("after the release: %s", got)
	}
	// A forced release (tenure release --force) notifies as well.
	lb, err := mustLocker(t, mem, "b").TryAcquire(ctx, "e", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	o2 := newObserver(t, mem, election.ObserverConfig{Resource: "e", PollInterval: time.Hour})
	ch2 := o2.Observe(ctx)
	if got := next(t, ch2); got != fmt.Sprintf("b()#%d", lb.Token()) {
		t.Fatalf("first observation %s; want b's term", got)
	}
	if err := mem.Release(ctx, "e", lb.Owner(), lb.Token()); err != nil {
		t.Fatal(err)
	}
	if got := next(t, ch2); got != "none" {
		t.Fatalf("after the forced release: %s", got)
	}
}

// Without notifications the observer polls: each change is seen at the
// next poll, and a leader whose lease runs out is seen gone when the
// store said it would expire, without waiting for the poll.
func TestObserverPollsAndReadsAtExpiry(t *testing.T) {
	fc := clock.NewFake()
	mem, _ := memory.Open(context.Background(), memory.Config{Clock: fc})
	f := storetest.NewFaulty(mem) // no Notifier
	ctx := ctxT(t)
	o := newObserver(t, f, election.ObserverConfig{Resource: "e", PollInterval: 10 * time.Second, Clock: fc})
	ch := o.Observe(ctx)
	if got := next(t, ch); got != "none" {
		t.Fatalf("first observation %s", got)
	}
	a, err := mem.Acquire(ctx, "e", "a#0000000000000001.1", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	gets := f.Calls(storetest.OpGet)
	fc.Advance(9 * time.Second)
	select {
	case l := <-ch:
		t.Fatalf("observed %s before the poll", describe(l))
	case <-time.After(20 * time.Millisecond):
	}
	if n := f.Calls(storetest.OpGet); n != gets {
		t.Fatalf("%d reads before the poll interval", n-gets)
	}
	fc.Advance(time.Second) // 10 s: the poll
	if got := next(t, ch); got != fmt.Sprintf("a()#%d", a.Token) {
		t.Fatalf("at the poll: %s", got)
	}
	// a's lease had 20 s left, more than the poll interval: the next read
	// is at 20 s. b is granted a 3 s lease right before it, which is not
	// renewed: the read after is at its expiry, 23 s, not at the poll.
	if err := mem.Release(ctx, "e", a.Owner, a.Token); err != nil {
		t.Fatal(err)
	}
	fc.Advance(10*time.Second - time.Millisecond)
	b, err := mem.Acquire(ctx, "e", "b#0000000000000002.1", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fc.Advance(time.Millisecond)
	if got := next(t, ch); got != fmt.Sprintf("b()#%d", b.Token) {
		t.Fatalf("at the poll: %s", got)
	}
	fc.Advance(3*time.Second + 10*time.Millisecond)
	if got := next(t, ch); got != "none" {
		t.Fatalf("at b's expiry: %s", got)
	}
}

func mustLocker(t *testing.T, s driver.Store, id string) *tenure.Locker {
	t.Helper()
	lk, err := tenure.New(s, tenure.WithOwnerID(id))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lk.Close(context.Background()) })
	return lk
}

// A reader that does not read for a while delays neither the election nor
// the observer's reads: the changes wait for it, in order.
func TestObserverSlowReaderDelaysNothing(t *testing.T) {
	mem := memory.New()
	f := storetest.NewFaulty(mem) // counts the observer's reads
	ctx := ctxT(t)
	o := newObserver(t, f, election.ObserverConfig{Resource: "e", PollInterval: 5 * time.Millisecond})
	ch := o.Observe(ctx)
	polls := func(n int) { // waits for n more reads of the observer
		from := f.Calls(storetest.OpGet)
		waitFor(t, func() bool { return f.Calls(storetest.OpGet) >= from+n }, "the observer's reads")
	}
	polls(1)
	lk := mustLocker(t, mem, "a")
	var want []string
	for range 5 {
		l, err := lk.TryAcquire(ctx, "e", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, fmt.Sprintf("a()#%d", l.Token()))
		polls(2)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		want = append(want, "none")
		polls(2)
	}
	got := []string{next(t, ch)}
	if got[0] != "none" {
		t.Fatalf("first observation %s", got[0])
	}
	for len(got) < len(want)+1 {
		got = append(got, next(t, ch))
	}
	if fmt.Sprint(got[1:]) != fmt.Sprint(want) {
		t.Fatalf("observed %v; want %v", got[1:], want)
	}
}

// scripted is a store whose Get answers from a script, one answer per
// call, the last one for ever.
type scripted struct {
	driver.Store
	mu      sync.Mutex
	answers []*tenure.Record
}

func (s *scripted) Get(ctx context.Context, resource string) (tenure.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.answers[0]
	if len(s.answers) > 1 {
		s.answers = s.answers[1:]
	}
	if a == nil {
		return tenure.Record{}, fmt.Errorf("scripted: %w", tenure.ErrNotHeld)
	}
	return *a, nil
}

// A read older than what was reported (a lower token) is ignored; a store
// that cannot be read reports nothing.
func TestObserverIgnoresStaleReads(t *testing.T) {
	fc := clock.NewFake()
	rec := func(id string, token uint64) *tenure.Record {
		return &tenure.Record{Resource: "e", Owner: id + "#0000000000000001.1", Token: token}
	}
	s := &scripted{Store: memory.New(), answers: []*tenure.Record{rec("a", 5), rec("x", 4), rec("a", 5), nil, rec("x", 4), rec("b", 6)}}
	o := newObserver(t, s, election.ObserverConfig{Resource: "e", PollInterval: time.Second, Clock: fc})
	ch := o.Observe(ctxT(t))
	var got []string
	for len(got) < 3 {
		select {
		case l := <-ch:
			got = append(got, describe(l))
		case <-time.After(time.Millisecond):
			fc.Advance(time.Second)
		}
	}
	if fmt.Sprint(got) != "[a()#5 none b()#6]" {
		t.Fatalf("observed %v", got)
	}
}

func TestObserverConfig(t *testing.T) {
	mem := memory.New()
	for name, cfg := range map[string]election.ObserverConfig{
		"no resource":   {},
		"bad resource":  {Resource: "\xff"},
		"negative poll": {Resource: "e", PollInterval: -time.Second},
	} {
		if _, err := election.NewObserver(mem, cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := election.NewObserver(mem, election.ObserverConfig{Resource: "\xff"}); !errors.Is(err, tenure.ErrInvalidResource) {
		t.Errorf("bad resource: %v; want ErrInvalidResource", err)
	}
	o := newObserver(t, mem, election.ObserverConfig{Resource: "e"})
	if _, err := o.Leader(context.Background()); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("Leader of a free election: %v", err)
	}
	// The channel closes when the context ends.
	ctx, cancel := context.WithCancel(context.Background())
	ch := o.Observe(ctx)
	recv(t, ch, "the first observation")
	cancel()
	for range ch {
	}
}
