package xds

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/krteds/krteds/collections"
)

// conn is one ADS stream (istiod's Connection): who its client is, its subscription to each
// type, and what its sender has in hand.
type conn struct {
	id          string
	delta       bool
	peer        string
	connectedAt time.Time
	// identity is the authenticated client (TLS port), nil on the plaintext port.
	identity *Identity
	logs     limiter
	// istioVersion is the client's pilot_xds version label.
	istioVersion string
	// loopback: both ends of the connection are loopback addresses.
	loopback bool
	// slot is the stream's bit in the index's subscriber sets (set by subscriberIndex.addStream).
	slot uint32

	// wake (capacity 1) tells the stream's sender to look for work.
	wake chan struct{}
	// marks are the changes reported and not yet taken into the subscriptions.
	marks marks
	// unwritten is the response handed to gRPC and not yet written (the sender's own); stalled
	// is closed when the client has read nothing of it for the send timeout.
	unwritten   *releasingPool
	stalled     chan struct{}
	stalledOnce sync.Once
	// resuming: the last response was a part of an answer with more to follow (the sender's).
	resuming bool
	// draining is closed when the server is shutting down and the stream must go (Drain).
	draining  chan struct{}
	drainOnce sync.Once

	mu     sync.Mutex
	closed bool
	proxy  *collections.ConnectedProxy
	view   *collections.View
	types  [numTypes]*subscription
	nonce  uint64
	// unknown are requests for types krteds does not serve, each answered once with an empty
	// response (bounded; no other state is kept for them).
	unknown []debugRequest
	// ledsSent: the last response of endpoints held a LEDS form; noLEDS: the client rejected one,
	// and is sent whole CLAs.
	ledsSent, noLEDS bool
	// debugSent counts the answers to debug types sent on the stream; their nonces are
	// debugNonce(n), so that an ACK of one is told from a new request.
	debugSent atomic.Uint64
}

func newConn(id string, delta bool, peer string) *conn {
	return &conn{id: id, delta: delta, peer: peer, connectedAt: time.Now(), wake: make(chan struct{}, 1), stalled: make(chan struct{}),
		draining: make(chan struct{})}
}

// handOver is the pool of the framing of a response of n bytes about to be handed to gRPC, taken
// from lane: once gRPC has written it, the bytes go back to the lane and the stream may send its
// next response. A response not written within timeout (not negative) stalls the stream.
func (c *conn) handOver(lane *budgetLane, n int, timeout time.Duration) *releasingPool {
	p := &releasingPool{lane: lane, n: int64(n), written: make(chan struct{})}
	if timeout > 0 {
		p.timer = time.AfterFunc(timeout, func() { c.stalledOnce.Do(func() { close(c.stalled) }) })
	}
	c.unwritten = p
	return p
}

// waitWritten waits until the stream's last response has been written.
func (c *conn) waitWritten(ctx context.Context) error {
	p := c.unwritten
	if p == nil {
		return nil
	}
	select {
	case <-p.written:
		c.unwritten = nil
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.stalled:
		return errStalled
	}
}

// hasSent reports whether the stream sent its client the cluster or the CLA of a name.
func (c *conn) hasSent(id nameID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range []typ{tEndpoint, tCluster} {
		if sb := c.types[t]; sb != nil {
			if held, ok := sb.subs.get(id); ok && held.version != 0 {
				return true
			}
		}
	}
	return false
}

func (c *conn) kick() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// marks are the changes reported for a stream and not yet taken into its subscriptions: the
// source's notifications (onChange) leave them here, under a lock of their own, and never wait
// for the stream's sender deciding a response under c.mu; the sender takes them (takeMarks).
type marks struct {
	mu  sync.Mutex
	ids [numTypes]map[nameID]int64
	all [numTypes]bool
}

// markDirty marks names (nil: all) of a type to be looked at again, for an input change at at
// (unix ns).
func (c *conn) markDirty(t typ, ids []nameID, at int64) {
	c.marks.mu.Lock()
	if ids == nil || t.fullState() {
		c.marks.all[t] = true
	}
	if len(ids) > 0 && c.marks.ids[t] == nil {
		c.marks.ids[t] = make(map[nameID]int64, len(ids))
	}
	for _, id := range ids {
		c.marks.ids[t][id] = at
	}
	c.marks.mu.Unlock()
	c.kick()
}

// takeMarks moves the marks of type t into its subscription (c.mu held); they are dropped for a
// type the stream does not subscribe to.
func (c *conn) takeMarks(t typ) {
	c.marks.mu.Lock()
	ids, all := c.marks.ids[t], c.marks.all[t]
	c.marks.ids[t], c.marks.all[t] = nil, false
	c.marks.mu.Unlock()
	if sb := c.types[t]; sb != nil {
		sb.mark(ids, all)
	}
}

// viewChanged sets the stream's view; every name is looked at again.
func (c *conn) viewChanged(v *collections.View) {
	c.mu.Lock()
	changed := c.setViewLocked(v)
	c.mu.Unlock()
	if changed {
		c.kick()
	}
}

// setViewLocked sets the stream's view, every name to be looked at again, unless it is the view
// the stream has (c.mu held).
func (c *conn) setViewLocked(v *collections.View) bool {
	if c.closed || (c.view != nil && v != nil && c.view.Equals(*v)) {
		return false
	}
	c.view = v
	for _, sb := range c.types {
		if sb != nil {
			sb.dirtyAll = true
		}
	}
	return true
}

// close marks the stream closed and forgets what it held, returned per type for the index.
func (c *conn) close() (held [numTypes][]nameID, proxy *collections.ConnectedProxy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for t, sb := range c.types {
		if sb != nil {
			held[t] = sb.ended()
		}
	}
	return held, c.proxy
}

func (c *conn) proxyID() string {
	if c.proxy == nil {
		return ""
	}
	return c.proxy.ID
}

func (c *conn) status(names *nameTable) ConnStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	cs := ConnStatus{ConnID: c.id, Delta: c.delta, Peer: c.peer, ConnectedAt: c.connectedAt, IstioVersion: c.istioVersion,
		Watches: map[string][]string{}, Types: map[string]TypeStatus{}}
	if c.proxy != nil {
		p := *c.proxy
		cs.Proxy = &p
	}
	if c.view != nil {
		v := *c.view
		cs.View = &v
	}
	for t, sb := range c.types {
		if sb == nil {
			continue
		}
		var ws []string
		sb.eachExplicit(func(id nameID) { ws = append(ws, names.name(id)) })
		slices.Sort(ws)
		if sb.wildcard {
			ws = append([]string{"*"}, ws...)
		}
		cs.Watches[typ(t).url()] = ws
		ts := sb.st
		ts.Subscribed = sb.subs.len()
		cs.Types[typ(t).url()] = ts
	}
	return cs
}
