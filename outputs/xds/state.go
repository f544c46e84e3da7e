package xds

import (
	"context"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/krteds/krteds/collections"
)

// conn is one ADS stream.
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
	// slot is the stream's bit in the server's subscriber sets (set by register).
	slot uint32

	// wake (capacity 1) tells the stream's sender to look for work.
	wake chan struct{}
	// marks are the changes reported and not yet taken into the types' state.
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
	types  [numTypes]*typeState
	nonce  uint64
	// unknown are type URLs of requests for types krteds does not serve, each answered once
	// with an empty response (bounded; no other state is kept for them).
	unknown []debugRequest
	// ledsSent: the last response of endpoints held a LEDS form; noLEDS: the client rejected one,
	// and is sent whole CLAs.
	ledsSent, noLEDS bool
	// debugSent counts the answers to debug types sent on the stream; their nonces are
	// debugNonce(n), so that an ACK of one is told from a new request.
	debugSent atomic.Uint64
}

// sub is what a stream holds of one name of one type.
type sub struct {
	// version is what the client holds (0: nothing).
	version uint64
	// explicit: the client asked for the name (otherwise it came with a wildcard subscription).
	explicit bool
}

// typeState is the protocol state of one type on one stream.
type typeState struct {
	wildcard bool
	subs     subSet
	// dirty names must be looked at again, each with the input change behind its mark (unix ns,
	// 0 if none: a new subscription); dirtyAll: every name (dirty then only carries times).
	dirty    map[nameID]int64
	dirtyAll bool
	// inflight: a response was sent and is neither ACKed nor NACKed; changes wait for it.
	inflight bool
	// force answers even if nothing changed: the first response, and endpoints after clusters.
	force bool
	// forceNext forces the answer to the next request (endpoints, after a clusters response).
	forceNext bool
	// members are, for LEDS, what the client holds of each collection subscribed to.
	members map[nameID]heldCollection
	// deferred are, for endpoints, the names whose cluster is being removed: their emptied CLA
	// waits for the clusters response that removes the cluster, as istiod sends them.
	deferred map[nameID]int64
	// sweep are the names a look at every name has still to look at (next takes them a part at
	// a time, the last first).
	sweep []nameID
	// listHash is, on state of the world, the hash of the names of the last request applied
	// (listed: there was one): an ACK repeating them changes nothing.
	listHash uint64
	listed   bool
	st       TypeStatus
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

// sent reports whether the stream sent its client the cluster or the CLA of a name.
func (c *conn) sent(id nameID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range []typ{tEndpoint, tCluster} {
		if st := c.types[t]; st != nil {
			if sb, ok := st.subs.get(id); ok && sb.version != 0 {
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

// marks are the changes reported for a stream and not yet taken into its types' state: the
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

// takeMarks moves the marks of type t into its state (c.mu held); they are dropped for a type
// the stream has no state of.
func (c *conn) takeMarks(t typ, st *typeState) {
	c.marks.mu.Lock()
	ids, all := c.marks.ids[t], c.marks.all[t]
	c.marks.ids[t], c.marks.all[t] = nil, false
	c.marks.mu.Unlock()
	if st == nil {
		return
	}
	if all {
		st.dirtyAll = true
	}
	if len(ids) == 0 {
		return
	}
	if st.dirty == nil {
		st.dirty = ids
		return
	}
	for id, at := range ids {
		st.dirty[id] = at
	}
}

// viewChanged sets the stream's view; every name is looked at again.
func (c *conn) viewChanged(v *collections.View) {
	c.mu.Lock()
	if c.closed || (c.view != nil && v != nil && c.view.Equals(*v)) {
		c.mu.Unlock()
		return
	}
	c.view = v
	for _, st := range c.types {
		if st != nil {
			st.dirtyAll = true
		}
	}
	c.mu.Unlock()
	c.kick()
}

// item is one resource of a response.
type item struct {
	id  nameID
	res *collections.Resource
	// update: the client held an older version (the convergence metric counts these).
	update bool
	// at is the input change the stream was marked for (unix ns, 0 if none).
	at int64
}

// response is what a type's state decided to send.
type response struct {
	t     typ
	items []item
	// removed names (strings: the stream may have been their last holder).
	removed []string
	version string
	nonce   string
	// more: the answer goes on in the next response (it was cut at Limits.ResponseBytes).
	more bool
}

// next decides the response of type t, if one is due (c.mu held). It looks only at the dirty
// names unless everything must be looked at (a state-of-the-world list of clusters or listeners
// always is); names still being computed stay dirty. Where the type's response may be split, it
// looks only until the response reaches Limits.ResponseBytes: a look at every name (a stream's
// first answer) is a sweep, its names taken a part at a time, after the names marked since.
func (s *Server) next(c *conn, t typ) *response {
	st := c.types[t]
	c.takeMarks(t, st)
	if st == nil || st.inflight || c.view == nil || !s.synced.Load() {
		return nil
	}
	if !st.force && !st.dirtyAll && len(st.dirty) == 0 && len(st.sweep) == 0 {
		return nil
	}
	if t == tLbEndpoint {
		return s.nextCollections(c, st)
	}
	splittable := t.splittable(c.delta)
	full := st.force || st.dirtyAll || (t.fullState() && !c.delta)
	if full && splittable && !st.wildcard {
		st.sweep = st.sweep[:0]
		st.subs.each(func(id nameID, sb sub) {
			if sb.explicit {
				st.sweep = append(st.sweep, id)
			}
		})
		st.dirtyAll, full = false, false
	}
	limit := math.MaxInt
	if splittable {
		limit = s.limits.ResponseBytes
	}
	// A forced state-of-the-world response lists what it looked at, changed or not.
	listsAll := !c.delta && (t.fullState() || st.force)
	var (
		current = map[nameID]*collections.Resource{}
		changed []nameID
		removed []nameID
		pending map[nameID]int64
		when    = map[nameID]int64{} // the input change behind each name looked at
		size    int
	)
	var leds bool // a CLA of the response is a LEDS form
	look := func(id nameID, at int64) {
		when[id] = at
		r, wait := s.src.Resolve(c.view, t.url(), s.names.name(id))
		r, isLEDS := formFor(c, t, r)
		leds = leds || isLEDS
		held, _ := st.subs.get(id)
		switch {
		case wait:
			if pending == nil {
				pending = map[nameID]int64{}
			}
			pending[id] = at
		case r == nil:
			if held.version != 0 {
				removed = append(removed, id)
			}
		case t == tEndpoint && r.Endpoints == 0 && s.clusterLeaving(c, id, r, held):
			if st.deferred == nil {
				st.deferred = map[nameID]int64{}
			}
			st.deferred[id] = at
		default:
			current[id] = r
			if held.version != r.Version {
				changed = append(changed, id)
			}
			if listsAll || held.version != r.Version {
				size += itemSize(r, c.delta)
			}
		}
	}
	if full {
		st.subs.each(func(id nameID, sb sub) {
			if sb.explicit {
				look(id, st.dirty[id])
			}
		})
		if st.wildcard {
			listed := map[nameID]bool{}
			for _, r := range s.src.List(c.view, t.url()) {
				id, known := s.names.lookup(r.Name)
				if !known || !s.held(st, id) {
					id = s.hold(c, t, st, r.Name)
				}
				listed[id] = true
				if _, ok := current[id]; ok {
					continue
				}
				current[id] = r
				when[id] = st.dirty[id]
				if held, _ := st.subs.get(id); held.version != r.Version {
					changed = append(changed, id)
				}
			}
			// What the client holds through the wildcard that is listed no more.
			st.subs.each(func(id nameID, sb sub) {
				if !sb.explicit && !listed[id] {
					if sb.version != 0 {
						removed = append(removed, id)
					} else {
						s.drop(c, t, st, id)
					}
				}
			})
		}
		if t.fullState() && len(pending) > 0 {
			st.dirtyAll = true // a complete list waits until every part of it is computed
			return nil
		}
		st.dirty = pending
	} else {
		for id, at := range st.dirty {
			if size > limit {
				break
			}
			delete(st.dirty, id)
			if sb, ok := st.subs.get(id); ok && (sb.explicit || st.wildcard) {
				look(id, at)
			}
		}
		for size <= limit && len(st.sweep) > 0 {
			id := st.sweep[len(st.sweep)-1]
			st.sweep = st.sweep[:len(st.sweep)-1]
			if _, marked := st.dirty[id]; marked {
				continue // marked since: looked at with those
			}
			if _, looked := when[id]; looked {
				continue
			}
			if sb, ok := st.subs.get(id); ok && sb.explicit {
				look(id, 0)
			}
		}
		if len(st.sweep) == 0 {
			st.sweep = nil
		}
		for id, at := range pending {
			if st.dirty == nil {
				st.dirty = map[nameID]int64{}
			}
			st.dirty[id] = at
		}
		if len(st.dirty) == 0 {
			// A map does not shrink: one that held a first answer's names would be walked whole
			// at every change after.
			st.dirty = nil
		}
	}
	st.dirtyAll = false
	if len(changed) == 0 && len(removed) == 0 && !st.force {
		if t == tCluster {
			// Nothing to remove after all: the endpoints held back need not wait.
			releaseDeferred(c)
		}
		return nil
	}
	if st.st.Responses == 0 && len(current) == 0 && len(pending) > 0 {
		return nil // the first answer waits for real content rather than saying nothing
	}
	var items []item
	if listsAll {
		for id, r := range current {
			items = append(items, item{id: id, res: r, at: when[id]})
		}
	} else {
		for _, id := range changed {
			items = append(items, item{id: id, res: current[id], at: when[id]})
		}
	}
	if t == tEndpoint {
		c.ledsSent = leds
	}
	cut := s.part(c, t, st, items)
	r := s.finish(c, t, st, cut, removed)
	r.more = len(cut) < len(items) || len(st.sweep) > 0 || size > limit
	return r
}

// part bounds a response to Limits.ResponseBytes where its type may be split (c.mu held): the
// items past the bound (in name order, at least one sent) stay marked, for the next response.
func (s *Server) part(c *conn, t typ, st *typeState, items []item) []item {
	limit := s.limits.ResponseBytes
	if !t.splittable(c.delta) || len(items) < 2 {
		return items
	}
	slices.SortFunc(items, func(a, b item) int { return int(a.id) - int(b.id) })
	size := 0
	for i, it := range items {
		size += itemSize(it.res, c.delta)
		if size <= limit || i == 0 {
			continue
		}
		if st.dirty == nil {
			st.dirty = make(map[nameID]int64, len(items)-i)
		}
		for _, rest := range items[i:] {
			st.dirty[rest.id] = rest.at
		}
		return items[:i]
	}
	return items
}

// finish makes the response of type t that sends items and removes names (c.mu held): the
// stream's state then records the versions sent and forgets what was removed through a wildcard
// or a collection.
func (s *Server) finish(c *conn, t typ, st *typeState, items []item, removed []nameID) *response {
	resp := &response{t: t, items: items}
	for _, id := range removed {
		resp.removed = append(resp.removed, s.names.name(id))
	}
	st.force = false
	slices.SortFunc(resp.items, func(a, b item) int { return int(a.id) - int(b.id) })
	for i, it := range resp.items {
		sb, _ := st.subs.get(it.id)
		resp.items[i].update = sb.version != 0 && sb.version != it.res.Version
		sb.version = it.res.Version
		st.subs.set(it.id, sb)
	}
	for _, id := range removed {
		if sb, _ := st.subs.get(id); sb.explicit {
			sb.version = 0
			st.subs.set(id, sb)
		} else {
			s.drop(c, t, st, id)
		}
	}
	st.subs.compact()
	return s.seal(c, t, st, resp)
}

// seal versions and numbers a response and records it as sent (c.mu held).
func (s *Server) seal(c *conn, t typ, st *typeState, resp *response) *response {
	resp.version = responseVersion(resp)
	c.nonce++
	resp.nonce = strconv.FormatUint(c.nonce, 10)
	st.inflight = true
	st.st.SentNonce, st.st.SentVersion, st.st.SentTime = resp.nonce, resp.version, time.Now()
	st.st.Responses++
	if t == tCluster {
		if eds := c.types[tEndpoint]; eds != nil {
			if !c.delta {
				// Envoy asks again for the endpoints of the clusters it warms, and waits for an
				// answer.
				eds.forceNext = true
			}
		}
		// The clusters being removed are gone now: their endpoints may follow.
		releaseDeferred(c)
	}
	return resp
}

// releaseDeferred marks the endpoints held back for a clusters response to be looked at again
// (c.mu held).
func releaseDeferred(c *conn) {
	eds := c.types[tEndpoint]
	if eds == nil || len(eds.deferred) == 0 {
		return
	}
	if eds.dirty == nil {
		eds.dirty = map[nameID]int64{}
	}
	for id, at := range eds.deferred {
		eds.dirty[id] = at
	}
	eds.deferred = nil
	c.kick()
}

// clusterLeaving reports whether the emptied CLA r of a name must wait for the clusters response
// that removes the name's cluster (c.mu held), as istiod orders them: the stream's client holds
// the cluster, and either the source no longer has it (the clusters are looked at again now),
// or the source has no CLA of the name any more where the client held one (the cluster's
// removal is on its way: the clusters are looked at when it comes).
func (s *Server) clusterLeaving(c *conn, id nameID, r *collections.Resource, held sub) bool {
	cds := c.types[tCluster]
	if cds == nil {
		return false
	}
	if sb, ok := cds.subs.get(id); !ok || sb.version == 0 {
		return false
	}
	if cr, pending := s.src.Resolve(c.view, tCluster.url(), s.names.name(id)); cr == nil && !pending {
		cds.dirtyAll = true
		c.kick()
		return true
	}
	return r.Absent && held.version != 0 && held.version != r.Version
}
func (s *Server) held(st *typeState, id nameID) bool {
	return st.subs.has(id)
}

// hold adds a name the stream holds through a wildcard subscription (c.mu held). The index is
// updated before the state, so no change of the name can be missed.
func (s *Server) hold(c *conn, t typ, st *typeState, name string) nameID {
	id := s.names.acquire(name)
	s.mu.Lock()
	s.indexLocked(t, id, c)
	s.mu.Unlock()
	st.subs.set(id, sub{})
	return id
}

// drop forgets a name the stream held (c.mu held).
func (s *Server) drop(c *conn, t typ, st *typeState, id nameID) {
	if !st.subs.del(id) {
		return
	}
	s.mu.Lock()
	s.unindexLocked(t, id, c)
	s.mu.Unlock()
	s.names.release(id)
}

// responseVersion is a content hash of a response: the same resources give the same version,
// whichever krteds instance computes it.
func responseVersion(r *response) string {
	h := xxhash.New()
	var b [8]byte
	for _, it := range r.items {
		_, _ = h.WriteString(it.res.Name)
		v := it.res.Version
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		_, _ = h.Write(b[:])
	}
	for _, n := range r.removed {
		_, _ = h.WriteString("-" + n)
	}
	return strconv.FormatUint(h.Sum64(), 16)
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
	for t, st := range c.types {
		if st == nil {
			continue
		}
		var ws []string
		st.subs.each(func(id nameID, sb sub) {
			if sb.explicit {
				ws = append(ws, names.name(id))
			}
		})
		slices.Sort(ws)
		if st.wildcard {
			ws = append([]string{"*"}, ws...)
		}
		cs.Watches[typ(t).url()] = ws
		ts := st.st
		ts.Subscribed = st.subs.len()
		cs.Types[typ(t).url()] = ts
	}
	return cs
}
