package redis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// script is a Lua script with its source, which a node that lost its
// script cache (a restart, a failover, SCRIPT FLUSH) is sent again.
type script struct {
	*redis.Script
	src string
}

func newScript(src string) *script { return &script{redis.NewScript(src), src} }

// call is one script call: its keys lie in one hash slot.
type call struct {
	sc   *script
	keys []string
	args []any

	res any
	err error
	// acked is how many replicas WAIT counted after the call (when the
	// store waits for replicas), and waitErr WAIT's own error.
	acked   int64
	waitErr error

	eval  bool   // send the source (EVAL): the node answered NOSCRIPT
	ask   string // the node an ASK redirection named, for the next attempt
	moved string // the node a MOVED redirection named, for the next attempt
}

// notSent marks an error that came before the call was sent (finding the
// node of a slot): nothing was written, so the outcome is definite.
type notSent struct{ error }

func (e notSent) Unwrap() error { return e.error }

// RedisError makes writeErr take it as definite (as go-redis's error
// replies are).
func (notSent) RedisError() {}

// eval runs one script call and answers as go-redis's Script.Run does. On
// one server (or Sentinel's master) it is Script.Run: EVALSHA, EVAL after
// NOSCRIPT, nothing resent after a broken connection (MaxRetries -1). On a
// cluster it goes to the master of the keys' slot and follows MOVED, ASK
// and TRYAGAIN (see runOne).
func (s *Store) eval(ctx context.Context, sc *script, keys []string, args ...any) (any, error) {
	if s.cluster == nil {
		return sc.Run(ctx, s.single, keys, args...).Result()
	}
	c := &call{sc: sc, keys: keys, args: args}
	s.runOne(ctx, c, false)
	return c.res, c.err
}

// write runs a script that writes, then, when the store waits for
// replicas, WAIT on the same connection (one round trip: a pipeline).
// acked is the number of replicas WAIT counted (-1 without WAIT); an error
// of WAIT itself, after the script ran, is returned as waitErr.
func (s *Store) write(ctx context.Context, sc *script, keys []string, args ...any) (res any, acked int64, waitErr, err error) {
	if s.waitN == 0 {
		res, err = s.eval(ctx, sc, keys, args...)
		return res, -1, nil, err
	}
	c := &call{sc: sc, keys: keys, args: args}
	s.runOne(ctx, c, true)
	return c.res, c.acked, c.waitErr, c.err
}

// runCalls runs calls, grouped by master: one pipeline (one round trip)
// per master, each followed by WAIT when wait is true; the masters in
// parallel. A call that a node redirected (MOVED, ASK), refused for now
// (TRYAGAIN, during a slot migration) or did not know (NOSCRIPT) is run
// again alone (runOne).
func (s *Store) runCalls(ctx context.Context, calls []*call, wait bool) {
	if len(calls) == 0 {
		return
	}
	if s.cluster == nil {
		s.runOn(ctx, s.single, calls, wait, false)
		for _, c := range calls {
			if again(c, false) {
				s.runOne(ctx, c, wait)
			}
		}
		return
	}
	byNode := map[*redis.Client][]*call{}
	for _, c := range calls {
		node, err := s.cluster.MasterForKey(ctx, c.keys[0])
		if err != nil {
			c.err = notSent{fmt.Errorf("find the master of %s: %w", c.keys[0], err)}
			continue
		}
		byNode[node] = append(byNode[node], c)
	}
	var wg sync.WaitGroup
	for node, cs := range byNode {
		wg.Go(func() { s.runOn(ctx, node, cs, wait, false) })
	}
	wg.Wait()
	for _, c := range calls {
		if again(c, true) {
			s.runOne(ctx, c, wait)
		}
	}
}

// again tells whether a call's error asks for another attempt, and notes
// what it needs (the source, or the node of an ASK or MOVED). Only a
// cluster's nodes redirect: elsewhere (cluster false) such an answer is an
// error like any other.
func again(c *call, cluster bool) bool {
	if c.err == nil {
		return false
	}
	msg := c.err.Error()
	switch {
	case strings.HasPrefix(msg, "NOSCRIPT"):
		c.eval = true
		return true
	case !cluster:
		return false
	case strings.HasPrefix(msg, "ASK "):
		if f := strings.Fields(msg); len(f) == 3 {
			c.ask = f[2]
			return true
		}
	case strings.HasPrefix(msg, "MOVED "):
		if f := strings.Fields(msg); len(f) == 3 {
			c.moved = f[2]
		}
		return true
	case strings.HasPrefix(msg, "TRYAGAIN"):
		return true
	}
	return false
}

// tryAgainFor bounds how long runOne keeps trying a call that nodes
// refuse for now (TRYAGAIN: a slot migration). Each attempt was refused
// before the script ran, so trying again is safe.
const tryAgainFor = 3 * time.Second

// maxAttempts bounds the attempts of one call, redirections included.
const maxAttempts = 100

// runOne runs one call until it is answered, following redirections: on a
// cluster, MOVED goes to the node it names (and reloads the slot map in
// the background), ASK goes to the node it names (with ASKING), TRYAGAIN
// (a migration has the keys of the call on two nodes, or the importing
// node lacks one of them) waits 10 ms, 20 ms, ... up to 200 ms and tries
// again, until tryAgainFor has passed; NOSCRIPT sends the source. A
// redirection is always followed (within maxAttempts), so the answer
// given up on is TRYAGAIN, not a redirection. On a cluster, a node that
// cannot be dialled (nothing was sent) makes the store read the slot map
// again at once and try the slot's master then, up to three times; any
// other network error reloads the map in the background but is not
// retried: the call may have been applied.
func (s *Store) runOne(ctx context.Context, c *call, wait bool) {
	deadline := time.Now().Add(tryAgainFor)
	dials, tries := 0, 0
	for attempt := 1; ; attempt++ {
		c.res, c.err, c.acked, c.waitErr = nil, nil, -1, nil
		node, asking := s.single, false
		if s.cluster != nil {
			var err error
			switch {
			case c.ask != "":
				node, asking = s.nodeClient(c.ask), true
			case c.moved != "":
				node = s.nodeClient(c.moved)
			default:
				node, err = s.cluster.MasterForKey(ctx, c.keys[0])
			}
			c.ask, c.moved = "", ""
			if err != nil {
				c.err = notSent{fmt.Errorf("find the master of %s: %w", c.keys[0], err)}
				return
			}
		}
		if !wait && !asking {
			if c.eval {
				c.res, c.err = c.sc.Eval(ctx, node, c.keys, c.args...).Result()
			} else {
				c.res, c.err = c.sc.EvalSha(ctx, node, c.keys, c.args...).Result()
			}
		} else {
			s.runOn(ctx, node, []*call{c}, wait, asking)
		}
		var rerr redis.Error
		var opErr *net.OpError
		if s.cluster != nil && c.err != nil && !errors.As(c.err, &rerr) {
			if errors.As(c.err, &opErr) && opErr.Op == "dial" && dials < 3 && time.Now().Before(deadline) {
				// Nothing was sent: the master of the slot is gone (a failover
				// moved its slots, or is about to). Learn the slot map again
				// now, and try there.
				dials++
				_ = s.cluster.ForEachMaster(ctx, func(context.Context, *redis.Client) error { return nil })
				select {
				case <-time.After(time.Duration(dials) * 50 * time.Millisecond):
				case <-ctx.Done():
					return
				}
				continue
			}
			s.cluster.ReloadState(ctx)
		}
		if !again(c, s.cluster != nil) || attempt >= maxAttempts {
			return
		}
		msg := c.err.Error()
		tryAgain := strings.HasPrefix(msg, "TRYAGAIN")
		if tryAgain && time.Now().After(deadline) {
			return
		}
		if f := onRedirect.Load(); f != nil {
			(*f)(msg)
		}
		if strings.HasPrefix(msg, "MOVED ") {
			s.cluster.ReloadState(ctx) // in the background; this call goes where MOVED said
		}
		if tryAgain {
			tries++
			select {
			case <-time.After(min(time.Duration(tries)*10*time.Millisecond, 200*time.Millisecond)):
			case <-ctx.Done():
				return
			}
		}
	}
}

// onRedirect, when set (by tests), is called with each answer that
// runOne follows.
var onRedirect atomic.Pointer[func(string)]

// runOn sends calls to node in one pipeline (ASKING before each when
// asking), and WAIT after them when wait is true.
func (s *Store) runOn(ctx context.Context, node *redis.Client, calls []*call, wait, asking bool) {
	pipe := node.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		if asking {
			pipe.Do(ctx, "asking")
		}
		if c.eval {
			cmds[i] = c.sc.Eval(ctx, pipe, c.keys, c.args...)
		} else {
			cmds[i] = c.sc.EvalSha(ctx, pipe, c.keys, c.args...)
		}
	}
	var w *redis.Cmd
	if wait {
		w = pipe.Do(ctx, "wait", s.waitN, s.waitTimeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range calls {
		c.res, c.err = cmds[i].Result()
		c.acked = -1
		if w != nil {
			c.acked, c.waitErr = w.Int64()
		}
	}
}

// nodeClient returns a client of the cluster node at addr (one that a
// MOVED or ASK redirection named), made like the clients of the cluster's
// nodes: with their options as go-redis set them, so it never sends a
// call again after a lost answer either (MaxRetries -1).
func (s *Store) nodeClient(addr string) *redis.Client {
	s.nodesMu.Lock()
	defer s.nodesMu.Unlock()
	if c, ok := s.nodes[addr]; ok {
		return c
	}
	o := *s.nodeOptions
	if o.MaintNotificationsConfig != nil {
		mc := *o.MaintNotificationsConfig
		o.MaintNotificationsConfig = &mc
	}
	o.Addr, o.NodeAddress = addr, addr
	o.MaxRetries = -1
	c := s.newNode(&o)
	if s.nodes == nil {
		s.nodes = map[string]*redis.Client{}
	}
	s.nodes[addr] = c
	return c
}
