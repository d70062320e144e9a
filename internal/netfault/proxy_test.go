package netfault

import (
	"bufio"
	"errors"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// echo serves lines back, and reports each line it received.
func echo(t *testing.T) (string, <-chan string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					got <- line
					c.Write([]byte(line))
				}
			}()
		}
	}()
	return ln.Addr().String(), got
}

// proxiedEcho starts an echo server (see echo), a proxy in front of it and
// a connection through the proxy, all closed when the test ends.
func proxiedEcho(t *testing.T) (*Proxy, net.Conn, <-chan string) {
	t.Helper()
	addr, got := echo(t)
	p, err := Start(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return p, c, got
}

func TestModes(t *testing.T) {
	p, c, got := proxiedEcho(t)
	r := bufio.NewReader(c)
	roundTrip := func(line string) (string, error) {
		c.SetDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Write([]byte(line)); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if s, err := roundTrip("a\n"); err != nil || s != "a\n" {
		t.Fatalf("pass: %q %v", s, err)
	}
	<-got
	p.SetMode(DropReplies)
	if _, err := roundTrip("b\n"); err == nil {
		t.Fatal("drop replies: got a reply")
	}
	if s := <-got; s != "b\n" {
		t.Fatalf("drop replies: server got %q", s)
	}
	p.SetMode(Blackhole)
	c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	c.Write([]byte("c\n"))
	select {
	case s := <-got:
		t.Fatalf("black hole: server got %q", s)
	case <-time.After(100 * time.Millisecond):
	}
	p.SetMode(Pass)
	p.Reset()
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("reset: connection still open")
	}
}

// StartOn listens on the address given (here another loopback address)
// and forwards as Start does.
func TestStartOn(t *testing.T) {
	target, _ := echo(t)
	p, err := StartOn("127.0.0.2", target)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	host, _, err := net.SplitHostPort(p.Addr())
	if err != nil || host != "127.0.0.2" {
		t.Fatalf("proxy listens on %s, want 127.0.0.2:PORT", p.Addr())
	}
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "hi\n" {
		t.Fatalf("read %q, %v through the proxy; want \"hi\\n\"", line, err)
	}
}

// SetLate: a request held back is delivered after its client gave up and
// closed the connection, and later requests on a connection wait behind the
// held ones.
func TestLateDelivery(t *testing.T) {
	addr, got := echo(t)
	p, err := Start(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const late = 300 * time.Millisecond
	p.SetLate(late)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	c.SetDeadline(time.Now().Add(50 * time.Millisecond))
	c.Write([]byte("late\n"))
	if _, err := bufio.NewReader(c).ReadString('\n'); err == nil {
		t.Fatal("got an answer to a held request")
	}
	c.Close() // the client gives up
	select {
	case s := <-got:
		if s != "late\n" {
			t.Fatalf("server got %q", s)
		}
		if d := time.Since(sent); d < late {
			t.Fatalf("delivered after %v, want at least %v", d, late)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the held request was never delivered")
	}
	if !p.Drain(5 * time.Second) {
		t.Fatal("Drain: requests still held")
	}
	if held, delivered, after := p.LateStats(); held != 1 || delivered != 1 || after != 1 {
		t.Errorf("LateStats = %d held, %d delivered, %d after close; want 1, 1, 1", held, delivered, after)
	}

	// Order: a request sent after SetLate(0) waits for one held before it.
	p.SetLate(late)
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	c2.Write([]byte("first\n"))
	time.Sleep(20 * time.Millisecond)
	p.SetLate(0)
	c2.Write([]byte("second\n"))
	c2.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c2)
	for _, want := range []string{"first\n", "second\n"} {
		if s, err := r.ReadString('\n'); err != nil || s != want {
			t.Fatalf("read %q, %v; want %q", s, err, want)
		}
		if s := <-got; s != want {
			t.Fatalf("server got %q, want %q", s, want)
		}
	}
}

// Partition: an open connection is silent, a new connection does not
// complete (the dial times out; it is not refused), and once the partition
// is over new connections work again.
func TestPartition(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Partition fills a listen queue of 0: Linux only")
	}
	p, c, got := proxiedEcho(t)
	c.Write([]byte("a\n"))
	if s := <-got; s != "a\n" {
		t.Fatalf("pass: server got %q", s)
	}
	p.SetMode(Partition)
	c.Write([]byte("b\n"))
	select {
	case s := <-got:
		t.Fatalf("partition: server got %q", s)
	case <-time.After(100 * time.Millisecond):
	}
	for i := 0; i < 3; i++ {
		start := time.Now()
		d, err := net.DialTimeout("tcp", p.Addr(), 300*time.Millisecond)
		if err == nil {
			d.Close()
			t.Fatalf("partition: dial %d completed", i)
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() || time.Since(start) < 250*time.Millisecond {
			t.Fatalf("partition: dial %d ended with %v after %v; want a timeout (a connection request that is dropped, not refused)", i, err, time.Since(start))
		}
	}
	p.SetMode(Pass)
	d, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatalf("after the partition: %v", err)
	}
	defer d.Close()
	d.Write([]byte("c\n"))
	select {
	case s := <-got:
		if s != "c\n" {
			t.Fatalf("after the partition: server got %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("after the partition: a new connection forwards nothing")
	}
}

// A dial made right after SetMode(Partition) returns never completes: the
// accept loop, which may have been waiting in Accept, takes nothing from the
// queue once the partition began; and the proxy's own connections that
// filled the queue are closed when it ends.
func TestPartitionAtOnceAndNoLeak(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Partition fills a listen queue of 0: Linux only")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // no finalizer closes a leaked connection
	p, _, _ := proxiedEcho(t)
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip(err)
		}
		return len(ents)
	}
	before := fds()
	for i := 0; i < 10; i++ {
		time.Sleep(20 * time.Millisecond) // the accept loop waits in Accept again
		p.SetMode(Partition)
		if c, err := net.DialTimeout("tcp", p.Addr(), 100*time.Millisecond); err == nil {
			c.Close()
			t.Fatalf("partition %d: a dial right after SetMode(Partition) completed", i)
		}
		p.SetMode(Pass)
	}
	// A test dial that gave up after the kernel had queued it is served
	// and closed once its EOF reaches the server (halfCloseGrace at most).
	deadline := time.Now().Add(halfCloseGrace + 5*time.Second)
	for fds() > before+2 {
		if time.Now().After(deadline) {
			t.Fatalf("open files: %d before ten partitions, %d after", before, fds())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A client connection accepted while the proxy is partitioned (its
// handshake completed just before the partition) is dropped while the
// partition lasts and passes once it is over, as on a healed network; it
// is not kept open and silent until the proxy closes.
func TestAcceptedDuringPartitionPassesAfter(t *testing.T) {
	p, _, got := proxiedEcho(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	p.SetMode(Partition)
	if !p.handle(accepted) {
		t.Fatal("the proxy is closed")
	}
	c.SetDeadline(time.Now().Add(300 * time.Millisecond))
	c.Write([]byte("during\n"))
	if b := make([]byte, 16); true {
		if n, err := c.Read(b); err == nil {
			t.Fatalf("a reply while partitioned: %q", b[:n])
		}
	}
	p.SetMode(Pass)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("after\n")); err != nil {
		t.Fatal(err)
	}
	if s, err := bufio.NewReader(c).ReadString('\n'); err != nil || s != "after\n" {
		t.Fatalf("after the partition: %q, %v", s, err)
	}
	if s := <-got; s != "after\n" {
		t.Fatalf("the server got %q", s)
	}
}

// TestSilence: Silence drops both directions of the connections whose
// client sent the pattern, closing nothing; other connections and new ones
// pass.
func TestSilence(t *testing.T) {
	p, a, got := proxiedEcho(t)
	b, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ra, rb := bufio.NewReader(a), bufio.NewReader(b)
	roundTrip := func(c net.Conn, r *bufio.Reader, line string) (string, error) {
		c.SetDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := c.Write([]byte(line)); err != nil {
			return "", err
		}
		return r.ReadString('\n')
	}
	if s, err := roundTrip(a, ra, "LISTEN x\n"); err != nil || s != "LISTEN x\n" {
		t.Fatalf("a: %q %v", s, err)
	}
	<-got
	if s, err := roundTrip(b, rb, "SELECT 1\n"); err != nil || s != "SELECT 1\n" {
		t.Fatalf("b: %q %v", s, err)
	}
	<-got
	if n := p.Silence([]byte("LISTEN")); n != 1 {
		t.Fatalf("Silence silenced %d connections; want 1", n)
	}
	if n := p.Silence([]byte("LISTEN")); n != 0 {
		t.Fatalf("Silence again silenced %d connections; want 0", n)
	}
	// a: what it writes is accepted and lost; no reply, no EOF or reset.
	if s, err := roundTrip(a, ra, "ping\n"); !isTimeout(err) {
		t.Fatalf("silenced connection: %q, %v; want a timeout", s, err)
	}
	select {
	case line := <-got:
		t.Fatalf("the server received %q from a silenced connection", line)
	case <-time.After(100 * time.Millisecond):
	}
	// b and a new connection pass.
	if s, err := roundTrip(b, rb, "SELECT 2\n"); err != nil || s != "SELECT 2\n" {
		t.Fatalf("b after Silence: %q %v", s, err)
	}
	<-got
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s, err := roundTrip(c, bufio.NewReader(c), "LISTEN y\n"); err != nil || s != "LISTEN y\n" {
		t.Fatalf("new connection after Silence: %q %v", s, err)
	}
	<-got
	// An empty pattern silences every open connection.
	if n := p.Silence(nil); n != 2 {
		t.Fatalf("Silence(nil) silenced %d connections; want 2", n)
	}
	if _, err := roundTrip(b, rb, "SELECT 3\n"); !isTimeout(err) {
		t.Fatalf("b after Silence(nil): %v; want a timeout", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
