package xds

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/admission"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

// What other packages read of the streams: the debug answers (xdsdebug.Streams) and the load
// reports (lrs.Sent). A stream's state is read on its own goroutine, as a question in its inbox.

var (
	_ xdsdebug.Streams = (*Server)(nil)
)

// Proxies lists the identified streams.
func (s *Server) Proxies() []xdsdebug.Proxy {
	var out []xdsdebug.Proxy
	for _, st := range s.all() {
		if p := st.connectedProxy(); p != nil {
			out = append(out, xdsdebug.Proxy{ConnID: st.id, NodeID: p.ID, Namespace: p.Namespace})
		}
	}
	return out
}

// Status is one stream's state, with the names it watches when watches is set.
func (s *Server) Status(connID string, watches bool) (xdsdebug.ConnStatus, bool) {
	s.mu.RLock()
	st := s.streams[connID]
	s.mu.RUnlock()
	if st == nil {
		return xdsdebug.ConnStatus{}, false
	}
	var cs xdsdebug.ConnStatus
	ok := st.inbox.question(func() { cs = st.status(watches) })
	return cs, ok
}

// Resolve is the source's: what a proxy of view v is sent for a name.
func (s *Server) Resolve(v *collections.View, typeURL, name string) (*collections.Resource, bool) {
	return s.src.Resolve(v, typeURL, name)
}

// List is the source's: every resource of a type a proxy of view v sees.
func (s *Server) List(v *collections.View, typeURL string) []*collections.Resource {
	return s.src.List(v, typeURL)
}

// status is the stream's state (on its goroutine).
func (st *stream) status(watches bool) xdsdebug.ConnStatus {
	cs := xdsdebug.ConnStatus{ConnID: st.id, Delta: st.delta, Peer: st.peer, ConnectedAt: st.connectedAt, IstioVersion: st.istioVersion,
		Types: map[string]xdsdebug.TypeStatus{}}
	if p := st.connectedProxy(); p != nil {
		c := *p
		cs.Proxy = &c
	}
	if st.view != nil {
		v := *st.view
		cs.View = &v
	}
	if watches {
		cs.Watches = map[string][]string{}
	}
	for t, sb := range st.subs {
		if sb == nil {
			continue
		}
		ts := sb.st
		ts.Subscribed = sb.subs.len()
		ts.Behind = st.behindNow(typ(t), sb)
		cs.Types[typ(t).url()] = ts
		if !watches {
			continue
		}
		var ws []string
		sb.eachExplicit(func(id nameID) { ws = append(ws, st.srv.names.name(id)) })
		slices.Sort(ws)
		if sb.wildcard {
			ws = append([]string{"*"}, ws...)
		}
		cs.Watches[typ(t).url()] = ws
	}
	return cs
}

// behindNow is how the subscription's client is behind, marked stale past the threshold.
func (st *stream) behindNow(t typ, sb *subscription) *xdsdebug.Behind {
	b := st.behind(t, sb)
	if b != nil && st.srv.limits.StaleAfter > 0 && time.Since(b.Since) >= st.srv.limits.StaleAfter {
		b.Stale = true
	}
	return b
}

// Holders is, for each stream subscribed to a name of a type, what its client holds of it.
func (s *Server) Holders(typeURL, name string) []xdsdebug.Holding {
	t, ok := typeOf(typeURL)
	if !ok {
		return nil
	}
	id, sts := s.index.subscribersOf(t, name)
	var out []xdsdebug.Holding
	for _, st := range sts {
		p := st.connectedProxy()
		if p == nil {
			continue
		}
		h := xdsdebug.Holding{ConnID: st.id, NodeID: p.ID, Namespace: p.Namespace}
		if st.inbox.question(func() { st.holding(t, id, name, &h) }) {
			out = append(out, h)
		}
	}
	return out
}

// holding fills in what the stream's client holds of a name (on its goroutine).
func (st *stream) holding(t typ, id nameID, name string, h *xdsdebug.Holding) {
	sb := st.subs[t]
	if sb == nil {
		return
	}
	if held, ok := sb.subs.get(id); ok && st.srv.names.name(id) == name {
		h.Sent = held.version
		h.Acked = !sb.inflight || !sb.lag.sending.carries(id)
	}
	if st.view != nil {
		if r, _ := st.srv.src.Resolve(st.view, t.url(), name); r != nil {
			r, _ = st.formFor(t, r)
			h.Current = r.Version
		}
	}
	h.SentTime, h.AckedTime, h.LastError = sb.st.SentTime, sb.st.AckedTime, sb.st.LastError
	h.Behind = st.behindNow(t, sb)
}

// SentTo says, of names, those whose cluster or CLA some stream of a node id was sent, on a
// connection of the same identity (nil: the plaintext port).
func (s *Server) SentTo(nodeID string, idn *admission.Identity, names []string) map[string]bool {
	s.mu.RLock()
	var sts []*stream
	for _, st := range s.byNode[nodeID] {
		if (st.identity == nil) == (idn == nil) && (idn == nil || *st.identity == *idn) {
			sts = append(sts, st)
		}
	}
	s.mu.RUnlock()
	out := map[string]bool{}
	ids := make([]nameID, len(names))
	known := make([]bool, len(names))
	for i, n := range names {
		ids[i], known[i] = s.names.lookup(n)
	}
	for _, st := range sts {
		st.inbox.question(func() {
			for i, id := range ids {
				if known[i] && st.hasSent(id) {
					out[names[i]] = true
				}
			}
		})
	}
	return out
}

// hasSent reports whether the stream sent its client the cluster or the CLA of a name (on its
// goroutine).
func (st *stream) hasSent(id nameID) bool {
	for _, t := range []typ{tEndpoint, tCluster} {
		if sb := st.subs[t]; sb != nil && sb.hasSent(id) {
			return true
		}
	}
	return false
}

// connSeq is the sequence number of a connection id ("delta-12" → 12).
func connSeq(id string) int64 {
	n, _ := strconv.ParseInt(id[strings.LastIndexByte(id, '-')+1:], 10, 64)
	return n
}

// loopbackEnds reports whether both ends of a connection are loopback addresses.
func loopbackEnds(remote, local net.Addr) bool {
	is := func(a net.Addr) bool {
		if a == nil {
			return false
		}
		host, _, err := net.SplitHostPort(a.String())
		if err != nil {
			host = a.String()
		}
		ip := net.ParseIP(strings.Trim(host, "[]"))
		return ip != nil && ip.IsLoopback()
	}
	return is(remote) && is(local)
}

// Statuses is every identified stream's state, with the names it watches, ordered by
// connection id.
func (s *Server) Statuses() []xdsdebug.ConnStatus { return s.debug.Statuses(xdsdebug.Everything, true) }
