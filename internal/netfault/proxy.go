// Package netfault is a TCP proxy for fault tests: it stands between clients
// and a real server and, on command, passes traffic, delays it, drops it
// silently in one or both directions (a black hole: no reset, calls hang), or
// resets every connection.
package netfault

import (
	"io"
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
)

// Proxy is a TCP proxy from a loopback port to a target address. It is safe
// for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	mode   atomic.Int32
	delay  atomic.Int64 // added before forwarding each chunk, in nanoseconds

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
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
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's listening address (host:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetMode changes what the proxy does with traffic from now on.
func (p *Proxy) SetMode(m Mode) { p.mode.Store(int32(m)) }

// SetDelay delays every forwarded chunk by d (0 to stop).
func (p *Proxy) SetDelay(d time.Duration) { p.delay.Store(int64(d)) }

// Reset closes every open connection (clients see a reset or EOF); new
// connections are still accepted.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
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
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(client) {
			return
		}
		p.wg.Add(1)
		go p.serve(client)
	}
}

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
	done := make(chan struct{}, 2)
	go func() { p.copy(server, client, false); done <- struct{}{} }()
	go func() { p.copy(client, server, true); done <- struct{}{} }()
	<-done // one side ended: end both
}

// copy forwards src to dst chunk by chunk, applying the mode at each chunk.
func (p *Proxy) copy(dst io.Writer, src io.Reader, reply bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d)
			}
			switch Mode(p.mode.Load()) {
			case Blackhole:
				// dropped
			case DropReplies:
				if !reply {
					if _, werr := dst.Write(buf[:n]); werr != nil {
						return
					}
				}
			default:
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil { // EOF or a closed connection
			return
		}
	}
}
