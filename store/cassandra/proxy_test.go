package cassandra_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gocql "github.com/apache/cassandra-gocql-driver/v2"

	"github.com/tenure-go/tenure/store/cassandra"
)

// cqlProxy is a TCP proxy between the driver and one Cassandra node that
// understands CQL native protocol v4 frames (the driver is pinned to v4
// through Config.ClusterHook; v5 wraps frames in checksummed segments). On
// command it loses the reply to the next conditional write (a statement
// with an IF clause, alone or in a batch): the request reaches Cassandra and
// is executed, and the answer is dropped, or the connection is reset right
// after the request was forwarded; or it loses the request itself.
type cqlProxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu       sync.Mutex
	action   proxyAction
	prepared map[string]string // prepared statement id → CQL
	dropped  []string          // statements whose reply (or request) was lost
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

type proxyAction int

const (
	pass            proxyAction = iota
	dropNextReply               // forward the next conditional write, drop its reply
	resetAfterWrite             // forward the next conditional write, then reset the connection
	dropNextRequest             // drop the next conditional write itself
)

func newCQLProxy(t testing.TB, target string) *cqlProxy {
	t.Helper()
	// Listen on the target's own address (a loopback address in the
	// tests): gocql tells nodes apart by IP address alone, so proxies of
	// several nodes must not share one.
	host, _, err := net.SplitHostPort(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	p := &cqlProxy{t: t, ln: ln, target: target, prepared: map[string]string{}, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cqlProxy) addr() (net.IP, int) {
	a := p.ln.Addr().(*net.TCPAddr)
	return a.IP, a.Port
}

// arm sets what happens to the next conditional write.
func (p *cqlProxy) arm(a proxyAction) {
	p.mu.Lock()
	p.action = a
	p.mu.Unlock()
}

// lost returns the statements whose reply or request was lost so far.
func (p *cqlProxy) lost() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.dropped...)
}

func (p *cqlProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *cqlProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pc := &proxiedConn{p: p, client: c, server: s, pending: map[uint16]string{}, drop: map[uint16]proxyAction{}}
		p.wg.Add(2)
		go pc.upstream()
		go pc.downstream()
	}
}

type proxiedConn struct {
	p              *cqlProxy
	client, server net.Conn
	mu             sync.Mutex
	pending        map[uint16]string      // stream → CQL of a PREPARE in flight
	drop           map[uint16]proxyAction // stream → what to do with its reply
}

func (c *proxiedConn) closeBoth() {
	c.client.Close()
	c.server.Close()
}

const (
	opError    = 0x00
	opQuery    = 0x07
	opResult   = 0x08
	opPrepare  = 0x09
	opExecute  = 0x0A
	opBatch    = 0x0D
	resultPrep = 0x0004
)

// readFrame reads one v4 frame: 9-byte header and body.
func readFrame(r io.Reader) (hdr [9]byte, body []byte, err error) {
	if _, err = io.ReadFull(r, hdr[:]); err != nil {
		return
	}
	if v := hdr[0] & 0x7f; v != 4 {
		return hdr, nil, fmt.Errorf("cqlProxy: protocol version %d (pin the driver to v4)", v)
	}
	n := binary.BigEndian.Uint32(hdr[5:9])
	if n > 256<<20 {
		return hdr, nil, errors.New("cqlProxy: frame too large")
	}
	body = make([]byte, n)
	_, err = io.ReadFull(r, body)
	return
}

func longString(b []byte) (string, []byte, bool) {
	if len(b) < 4 {
		return "", nil, false
	}
	n := int(int32(binary.BigEndian.Uint32(b)))
	if n < 0 || len(b) < 4+n {
		return "", nil, false
	}
	return string(b[4 : 4+n]), b[4+n:], true
}

func shortBytes(b []byte) ([]byte, []byte, bool) {
	if len(b) < 2 {
		return nil, nil, false
	}
	n := int(binary.BigEndian.Uint16(b))
	if len(b) < 2+n {
		return nil, nil, false
	}
	return b[2 : 2+n], b[2+n:], true
}

// statements returns the CQL of the statements a request carries.
func (c *proxiedConn) statements(op byte, body []byte) []string {
	lookup := func(id []byte) string {
		c.p.mu.Lock()
		defer c.p.mu.Unlock()
		return c.p.prepared[string(id)]
	}
	switch op {
	case opQuery:
		if q, _, ok := longString(body); ok {
			return []string{q}
		}
	case opExecute:
		if id, _, ok := shortBytes(body); ok {
			return []string{lookup(id)}
		}
	case opBatch:
		if len(body) < 3 {
			return nil
		}
		n := int(binary.BigEndian.Uint16(body[1:3]))
		b := body[3:]
		var out []string
		for i := 0; i < n && len(b) > 0; i++ {
			kind := b[0]
			b = b[1:]
			var ok bool
			if kind == 0 {
				var q string
				if q, b, ok = longString(b); !ok {
					return out
				}
				out = append(out, q)
			} else {
				var id []byte
				if id, b, ok = shortBytes(b); !ok {
					return out
				}
				out = append(out, lookup(id))
			}
			if len(b) < 2 {
				return out
			}
			nv := int(binary.BigEndian.Uint16(b))
			b = b[2:]
			for j := 0; j < nv; j++ {
				if len(b) < 4 {
					return out
				}
				l := int(int32(binary.BigEndian.Uint32(b)))
				b = b[4:]
				if l > 0 {
					if len(b) < l {
						return out
					}
					b = b[l:]
				}
			}
		}
		return out
	}
	return nil
}

func conditional(stmts []string) bool {
	for _, s := range stmts {
		if strings.Contains(s, " IF ") {
			return true
		}
	}
	return false
}

// upstream forwards client → server frames, watching for conditional writes.
func (c *proxiedConn) upstream() {
	defer c.p.wg.Done()
	defer c.closeBoth()
	for {
		hdr, body, err := readFrame(c.client)
		if err != nil {
			return
		}
		op := hdr[4]
		stream := binary.BigEndian.Uint16(hdr[2:4])
		if op == opPrepare {
			if q, _, ok := longString(body); ok {
				c.mu.Lock()
				c.pending[stream] = q
				c.mu.Unlock()
			}
		}
		if op == opQuery || op == opExecute || op == opBatch {
			if stmts := c.statements(op, body); conditional(stmts) {
				c.p.mu.Lock()
				a := c.p.action
				if a != pass {
					c.p.action = pass
					c.p.dropped = append(c.p.dropped, strings.Join(stmts, "; "))
				}
				c.p.mu.Unlock()
				switch a {
				case dropNextRequest:
					continue // never reaches Cassandra; no reply will come
				case dropNextReply, resetAfterWrite:
					c.mu.Lock()
					c.drop[stream] = a
					c.mu.Unlock()
				}
			}
		}
		if _, err := c.server.Write(append(hdr[:], body...)); err != nil {
			return
		}
	}
}

// downstream forwards server → client frames, learning prepared ids and
// losing the replies it was told to.
func (c *proxiedConn) downstream() {
	defer c.p.wg.Done()
	defer c.closeBoth()
	for {
		hdr, body, err := readFrame(c.server)
		if err != nil {
			return
		}
		op := hdr[4]
		stream := binary.BigEndian.Uint16(hdr[2:4])
		c.mu.Lock()
		q, isPrep := c.pending[stream]
		delete(c.pending, stream)
		a, lose := c.drop[stream]
		delete(c.drop, stream)
		c.mu.Unlock()
		if isPrep && op == opResult && len(body) >= 4 && binary.BigEndian.Uint32(body) == resultPrep {
			if id, _, ok := shortBytes(body[4:]); ok {
				c.p.mu.Lock()
				c.p.prepared[string(id)] = q
				c.p.mu.Unlock()
			}
		}
		if lose {
			if a == resetAfterWrite {
				if tc, ok := c.client.(*net.TCPConn); ok {
					_ = tc.SetLinger(0) // RST, not FIN
				}
				return
			}
			continue
		}
		if _, err := c.client.Write(append(hdr[:], body...)); err != nil {
			return
		}
	}
}

// openProxied opens a store whose connections all go through a cqlProxy in
// front of the single node, with the driver pinned to protocol v4, a short
// query timeout (so a lost reply turns into a timeout quickly) and the
// given observer.
func openProxied(t *testing.T, mode cassandra.Mode, obs *lwtCounter) (*cassandra.Store, *cqlProxy) {
	t.Helper()
	needSingle(t)
	p := newCQLProxy(t, single)
	pip, pport := p.addr()
	s := openStore(t, mode, func(c *cassandra.Config) {
		c.Hosts = []string{net.JoinHostPort(pip.String(), strconv.Itoa(pport))}
		c.Timeout = time.Second
		c.ClusterHook = func(cc *gocql.ClusterConfig) {
			cc.ProtoVersion = 4
			cc.DisableInitialHostLookup = true
			// Whatever address the cluster reports, connect through the proxy.
			cc.AddressTranslator = gocql.AddressTranslatorFunc(func(net.IP, int) (net.IP, int) { return pip, pport })
			if obs != nil {
				cc.QueryObserver, cc.BatchObserver = obs, obs
			}
		}
	})
	return s, p
}
