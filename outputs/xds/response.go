package xds

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/krteds/krteds/collections"
)

// The response rules: what a stream is sent next for a type, decided from its subscription
// (subscription.go) and the source, bounded in size, versioned by content and numbered.

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
	c.takeMarks(t)
	st := c.types[t]
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
		st.eachExplicit(func(id nameID) { st.sweep = append(st.sweep, id) })
		st.dirtyAll, full = false, false
	}
	limit := math.MaxInt
	if splittable {
		limit = s.limits.ResponseBytes
	}
	// A state-of-the-world list of clusters or listeners lists what it looked at, changed or
	// not; any other response lists what changed and what is forced (sub.forced).
	listsAll := !c.delta && t.fullState()
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
			if held.version != r.Version || held.forced {
				changed = append(changed, id)
			}
			if listsAll || held.version != r.Version || held.forced {
				size += itemSize(r, c.delta)
			}
		}
	}
	if full {
		st.eachExplicit(func(id nameID) { look(id, st.dirty[id]) })
		if st.wildcard {
			listed := map[nameID]bool{}
			for _, r := range s.src.List(c.view, t.url()) {
				id, known := s.names.lookup(r.Name)
				if !known || !st.holds(id) {
					id = st.hold(r.Name)
				}
				listed[id] = true
				if _, ok := current[id]; ok {
					continue
				}
				current[id] = r
				when[id] = st.dirty[id]
				if held, _ := st.subs.get(id); held.version != r.Version || held.forced {
					changed = append(changed, id)
				}
			}
			// What the client holds through the wildcard that is listed no more.
			st.subs.each(func(id nameID, sb sub) {
				if !sb.explicit && !listed[id] {
					if sb.version != 0 {
						removed = append(removed, id)
					} else {
						st.drop(id)
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
func (s *Server) part(c *conn, t typ, st *subscription, items []item) []item {
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
// subscription then records the versions sent and forgets what was removed through a wildcard.
func (s *Server) finish(c *conn, t typ, st *subscription, items []item, removed []nameID) *response {
	resp := &response{t: t, items: items}
	for _, id := range removed {
		// Strings: the stream may be the names' last holder.
		resp.removed = append(resp.removed, s.names.name(id))
	}
	slices.SortFunc(resp.items, func(a, b item) int { return int(a.id) - int(b.id) })
	st.sent(resp.items, removed)
	return s.seal(c, t, st, resp)
}

// seal versions and numbers a response and records it as sent (c.mu held).
func (s *Server) seal(c *conn, t typ, st *subscription, resp *response) *response {
	resp.version = responseVersion(resp)
	c.nonce++
	resp.nonce = strconv.FormatUint(c.nonce, 10)
	st.inflight = true
	st.st.SentNonce, st.st.SentVersion, st.st.SentTime = resp.nonce, resp.version, time.Now()
	st.st.Responses++
	if t == tCluster {
		if eds := c.types[tEndpoint]; eds != nil {
			if c.delta {
				// Envoy warms the clusters sent and waits for their CLAs, but on delta does not
				// ask for them again: they are sent again (istiod's forceEDSPush sends every
				// CLA after answering a clusters request).
				ids := make([]nameID, len(resp.items))
				for i, it := range resp.items {
					ids[i] = it.id
				}
				eds.forceResend(ids)
			} else {
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
