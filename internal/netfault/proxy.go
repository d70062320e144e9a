// Package netfault is a TCP proxy for fault tests: it stands between clients
// and a real server and, on command, passes traffic, delays it, holds
// requests back and delivers them late (after their sender gave up), drops it
// silently in one or both directions (a black hole: no reset, calls hang),
// partitions the network (a black hole in which new connections never
// complete either), resets every connection, or silences chosen open
// connections (Silence: a half-open connection, as a NAT or firewall that
// forgot it leaves one, while the others and new ones pass).
package netfault

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what the proxy does with traffic.
type Mode int32

// Modes.
const (
	// Pass forwards everything.
	Pass Mode = iota
	// Blackhole drops everything in both directions without closing
	// connections, and accepts new connections without forwarding them: the
	// network between client and server is silently gone.
	Blackhole
	// DropReplies forwards client-to-server bytes and drops server-to-client
	// bytes: requests are applied, their answers are lost.
	DropReplies
	// Partition is Blackhole for the connections that are open, and new
	// connections are never completed: the proxy stops accepting and fills
	// its listen queue (a backlog of 0), so the kernel drops the clients'
	// connection requests (SYN) and a dial hangs until its own timeout, as
	// across a network partition, where a black hole's accepted connections
	// would let a client's dial succeed. Leaving it (SetMode) accepts again;
	// a client still dialing then connects at its next SYN retransmission
	// (Linux: 1 s, then 2 s, 4 s... after the first). Linux only; elsewhere
	// new connections are accepted and black-holed.
	Partition
)

// Proxy is a TCP proxy from a loopback port to a target address. It is safe
// for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	mode   atomic.Int32
	open   chan struct{} // closed while the proxy accepts; replaced by Partition

	// fillers are the proxy's own connections to itself (their dialing
	// side) that fill its listen queue while it is partitioned; they are
	// closed when the partition ends.
	fillers []net.Conn
	delay   atomic.Int64 // added before forwarding each chunk, in nanoseconds
	late    atomic.Int64 // requests read now are delivered this much later, in nanoseconds

	held, delivered, afterClose atomic.Int64 // LateStats

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	links  map[*link]struct{} // the client connections being served
	queued int                // chunks held back, not yet delivered or dropped
	idle   *sync.Cond
	closed bool
	wg     sync.WaitGroup
}

// Start listens on 127.0.0.1 (a free port) and forwards to target.
func Start(target string) (*Proxy, error) { return StartOn("127.0.0.1", target) }

// StartOn listens on a free port of the address host and forwards to
// target. Proxies for the nodes of one cluster should listen on addresses of
// their own (each on its node's address, for nodes on loopback addresses):
// some drivers tell nodes apart by IP address alone (gocql v2.1.2 does), so
// proxies that share an address but not a port look like one node to them.
func StartOn(host, target string) (*Proxy, error) {
	ln, err := listen(host)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, links: map[*link]struct{}{}, open: make(chan struct{})}
	close(p.open)
	p.idle = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetMode changes what the proxy does with traffic from now on.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := Mode(p.mode.Swap(int32(m)))
	switch {
	case m == Partition && old != Partition:
		p.open = make(chan struct{})
		// Push the accept loop out of Accept (it may be waiting in it):
		// from now on it waits for open, and nothing takes a connection
		// from the queue.
		p.setAcceptDeadline(time.Now())
		p.fillQueueLocked()
	case m != Partition && old == Partition:
		p.endPartitionLocked()
	}
}

// endPartitionLocked closes the connections that filled the queue and lets
// the accept loop accept again.
func (p *Proxy) endPartitionLocked() {
	for _, c := range p.fillers {
		c.Close()
	}
	p.fillers = nil
	p.setAcceptDeadline(time.Time{})
	select {
	case <-p.open:
	default:
		close(p.open)
	}
}

// setAcceptDeadline sets the listener's deadline for Accept (zero: none).
func (p *Proxy) setAcceptDeadline(t time.Time) {
	if l, ok := p.ln.(interface{ SetDeadline(time.Time) error }); ok {
		l.SetDeadline(t) //nolint:errcheck // a closed listener ends the loop anyway
	}
}

// fillerIP is the source address of the proxy's own connections that fill
// its listen queue: a connection accepted from it is one of them, also one
// whose dial gave up (a dial that times out on a loaded machine may still
// have been completed by the kernel and queued).
var fillerIP = net.IPv4(127, 254, 0, 1)

// fillQueueLocked connects to the proxy's own listener until a connection
// no longer completes: the listen queue is full, and the kernel drops
// further connection requests. The connections are kept until the
// partition ends; the accept loop closes those it accepts.
func (p *Proxy) fillQueueLocked() {
	d := net.Dialer{Timeout: 200 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: fillerIP}}
	for i := 0; i < 8; i++ {
		c, err := d.Dial("tcp", p.ln.Addr().String())
		if err != nil {
			return // the queue is full
		}
		p.fillers = append(p.fillers, c)
	}
}

// refill fills the listen queue again while the proxy is partitioned: the
// accept loop took a connection from it (it was in Accept when the
// partition began).
func (p *Proxy) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if Mode(p.mode.Load()) == Partition && !p.closed {
		p.fillQueueLocked()
	}
}

// filler reports whether c (accepted) is one of the proxy's own
// connections that filled the queue.
func filler(c net.Conn) bool {
	a, ok := c.RemoteAddr().(*net.TCPAddr)
	return ok && a.IP.Equal(fillerIP)
}

// isClosed reports whether Close was called.
func (p *Proxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// acceptOpen returns a channel closed while the proxy accepts connections.
func (p *Proxy) acceptOpen() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.open
}

// SetDelay delays every forwarded chunk by d (0 to stop).
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// SetLate holds back the requests (client-to-server bytes) read from now on
// and delivers each d after it was read, in order, on its own connection (0
// to stop: later requests are delivered as soon as those held before them
// were). Replies pass as they come. A client that gives up on a held
// request and closes its connection does not take the request back: the
// proxy keeps the server's side open, delivers what it held at its time,
// then half-closes it (the server reads the request, then end of file), and
// reads and drops the server's answers. A client that gives up without
// closing (a cancelled gRPC stream, an abandoned CQL stream) has its
// cancellation delivered just as late, after the request. So a request is
// applied by the server after its sender gave up, as a slow network may do.
func (p *Proxy) SetLate(d time.Duration) { p.late.Store(int64(d)) }

// LateStats returns, since the proxy started, the chunks of requests held
// back by SetLate, how many of them were delivered, and how many of those
// were delivered after their client had closed its connection.
func (p *Proxy) LateStats() (held, delivered, afterClose int64) {
	return p.held.Load(), p.delivered.Load(), p.afterClose.Load()
}

// Drain waits until every held request was delivered (or dropped by Reset or
// Close), or until timeout; it reports whether nothing is held.
func (p *Proxy) Drain(timeout time.Duration) bool {
	t := time.AfterFunc(timeout, func() {
		p.mu.Lock()
		p.idle.Broadcast()
		p.mu.Unlock()
	})
	defer t.Stop()
	end := time.Now().Add(timeout)
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.queued > 0 && time.Now().Before(end) {
		p.idle.Wait()
	}
	return p.queued == 0
}

// Reset closes every open connection (clients see a reset or EOF); new
// connections are still accepted.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// headBytes is how much of what each client sent first the proxy keeps, for
// Silence to match.
const headBytes = 16 << 10

// link is one client connection being served.
type link struct {
	mu     sync.Mutex
	head   []byte // the first headBytes the client sent
	silent atomic.Bool
}

// record keeps the start of what the client sent.
func (l *link) record(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := headBytes - len(l.head); n > 0 {
		l.head = append(l.head, b[:min(n, len(b))]...)
	}
}

func (l *link) sent(pattern []byte) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return bytes.Contains(l.head, pattern)
}

// Silence drops, from now on, every byte in both directions of each open
// connection whose client sent pattern among its first 16 KiB (every open
// connection for an empty pattern), without closing it: neither side gets
// a FIN or a reset, and what they write is acknowledged by the proxy and
// lost, as on a connection that a NAT or a firewall forgot (a half-open
// connection). Other connections, and connections opened later, are not
// affected; a silenced connection stays silent until one side closes it
// (the proxy then closes the other). It returns how many connections it
// silenced. For example, Silence([]byte("LISTEN")) silences a PostgreSQL
// client's listening connection and leaves its pool alone.
func (p *Proxy) Silence(pattern []byte) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for l := range p.links {
		if l.sent(pattern) && !l.silent.Swap(true) {
			n++
		}
	}
	return n
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.endPartitionLocked()
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		<-p.acceptOpen() // partitioned: the listen queue fills, new connections hang
		client, err := p.ln.Accept()
		if ne, ok := err.(net.Error); ok && ne.Timeout() && !p.isClosed() {
			continue // a partition began: wait for its end
		}
		if err != nil {
			return
		}
		if !p.handle(client) {
			return
		}
	}
}

// handle takes a connection the accept loop accepted, and reports false
// when the proxy is closed.
//
// A filler (accepted while the partition began, or queued during it) is the
// proxy's own: it stays open while the partition lasts, then is closed, and
// its place in the queue is filled again. Any other connection is served,
// also one accepted while partitioned (a client whose handshake the kernel
// completed just before the partition, or whose dial gave up after the
// kernel queued it): its bytes are dropped while the partition lasts, as
// every open connection's are, and pass once it is over, as a healed
// network's do; when its client has gone, serving it closes it.
func (p *Proxy) handle(client net.Conn) bool {
	partitioned := Mode(p.mode.Load()) == Partition
	if filler(client) {
		go func() {
			<-p.acceptOpen()
			client.Close()
		}()
		p.refill()
		return true
	}
	if !p.track(client) {
		return false
	}
	p.wg.Add(1)
	go p.serve(client)
	if partitioned {
		p.refill()
	}
	return true
}

// halfCloseGrace bounds how long the proxy keeps a server connection open
// after it delivered the requests of a client that had gone, for the server
// to answer them and close.
const halfCloseGrace = 10 * time.Second

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client)
	server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	l := &link{}
	p.mu.Lock()
	p.links[l] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	replies := make(chan struct{})
	go func() { p.copyReplies(l, client, server); close(replies) }()
	requests := make(chan struct{})
	go func() { p.copyRequests(l, server, client); close(requests) }()
	select {
	case <-replies: // the server ended (or the proxy reset it): end both
	case <-requests:
		// The client ended and everything it sent was delivered (or the
		// server refused it): give the server a moment to answer and close.
		t := time.NewTimer(halfCloseGrace)
		defer t.Stop()
		select {
		case <-replies:
		case <-t.C:
		}
	}
}

// forward writes one chunk of link l to dst as the mode says; false when
// dst failed.
func (p *Proxy) forward(l *link, dst net.Conn, b []byte, reply bool) bool {
	if d := time.Duration(p.delay.Load()); d > 0 {
		time.Sleep(d)
	}
	if l.silent.Load() {
		return true // dropped
	}
	switch Mode(p.mode.Load()) {
	case Blackhole, Partition:
		return true // dropped
	case DropReplies:
		if reply {
			return true
		}
	}
	_, err := dst.Write(b)
	return err == nil
}

// copyReplies forwards the server's bytes to the client chunk by chunk. Once
// the client is gone, it reads and drops them until the server ends.
func (p *Proxy) copyReplies(l *link, client, server net.Conn) {
	buf := make([]byte, 32<<10)
	clientGone := false
	for {
		n, err := server.Read(buf)
		if n > 0 && !clientGone && !p.forward(l, client, buf[:n], true) {
			clientGone = true
		}
		if err != nil { // EOF or a closed connection
			return
		}
	}
}

type chunk struct {
	b   []byte
	due time.Time
	// held: read while SetLate was on, or queued behind such a chunk.
	held bool
}

// copyRequests forwards the client's bytes to the server in order, each at
// its due time (when read, or SetLate later). When the client ends, what it
// sent is still delivered, then the server's side is half-closed.
func (p *Proxy) copyRequests(l *link, server, client net.Conn) {
	r := &requestQueue{p: p, wake: make(chan struct{}, 1)}
	go r.read(l, client)
	defer r.drop()
	for {
		c, more := r.next()
		if !more {
			if tc, ok := server.(*net.TCPConn); ok {
				tc.CloseWrite() //nolint:errcheck // the server may be gone already
			}
			return
		}
		if d := time.Until(c.due); d > 0 {
			t := time.NewTimer(d)
			<-t.C
		}
		ok := p.forward(l, server, c.b, false)
		gone := r.pop()
		if c.held && ok {
			p.delivered.Add(1)
			if gone {
				p.afterClose.Add(1)
			}
		}
		r.done(c)
		if !ok {
			return
		}
	}
}

// requestQueue holds a client's chunks between the goroutine that reads
// them (read) and the one that forwards them to the server in order
// (copyRequests).
type requestQueue struct {
	p       *Proxy
	mu      sync.Mutex
	q       []chunk
	eof     bool
	dead    bool // the sender stopped: later chunks are dropped
	lastDue time.Time
	wake    chan struct{} // one signal: the queue or eof changed
}

func (r *requestQueue) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// read queues what the client sends, chunk by chunk, until it ends.
func (r *requestQueue) read(l *link, client net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			l.record(buf[:n])
			if !r.add(buf[:n], time.Now(), time.Duration(r.p.late.Load())) {
				continue
			}
		}
		if err != nil {
			r.mu.Lock()
			r.eof = true
			r.mu.Unlock()
			r.signal()
			return
		}
	}
}

// add queues a copy of b, read at now, due late after it but never before
// the chunk ahead of it. It is held (counted in the Proxy's held and
// queued) when late is on or the chunk ahead is held. After the sender
// stopped, b is dropped and add returns false.
func (r *requestQueue) add(b []byte, now time.Time, late time.Duration) bool {
	r.mu.Lock()
	if r.dead {
		r.mu.Unlock()
		return false
	}
	c := chunk{b: append([]byte(nil), b...), due: now.Add(late)}
	if c.due.Before(r.lastDue) {
		c.due = r.lastDue // in order, behind what is held
	}
	r.lastDue = c.due
	c.held = late > 0 || len(r.q) > 0 && r.q[len(r.q)-1].held
	if c.held {
		r.p.held.Add(1)
		r.p.mu.Lock()
		r.p.queued++
		r.p.mu.Unlock()
	}
	r.q = append(r.q, c)
	r.mu.Unlock()
	r.signal()
	return true
}

// next waits for the chunk at the head of the queue and returns it, still
// queued, or returns more = false once the queue is empty and the client
// has ended.
func (r *requestQueue) next() (c chunk, more bool) {
	for {
		r.mu.Lock()
		if len(r.q) > 0 {
			c := r.q[0]
			r.mu.Unlock()
			return c, true
		}
		ended := r.eof
		r.mu.Unlock()
		if ended {
			return chunk{}, false
		}
		<-r.wake
	}
}

// pop removes the chunk at the head of the queue, and says whether the
// client had ended by then.
func (r *requestQueue) pop() (clientEnded bool) {
	r.mu.Lock()
	r.q = r.q[1:]
	gone := r.eof
	r.mu.Unlock()
	return gone
}

// done takes a held chunk, delivered or dropped, off the Proxy's count of
// queued chunks, and wakes those waiting for it to reach zero.
func (r *requestQueue) done(c chunk) {
	if !c.held {
		return
	}
	r.p.mu.Lock()
	r.p.queued--
	if r.p.queued == 0 {
		r.p.idle.Broadcast()
	}
	r.p.mu.Unlock()
}

// drop ends the queue when the sender stops: whatever is left was dropped
// (the server failed), and what the client sends later is dropped too.
func (r *requestQueue) drop() {
	r.mu.Lock()
	for _, c := range r.q {
		r.done(c)
	}
	r.q, r.dead = nil, true
	r.mu.Unlock()
}
