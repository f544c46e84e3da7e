package xds

import (
	"slices"
	"strconv"
	"time"

	"github.com/krteds/krteds/collections"
)

// What a stream is sent next of a type: its marks taken (turn), a plan of its subscription
// (plan.go), each name resolved for the stream's view, and the response recorded as sent. The
// rules between types live here: endpoints after the clusters that name them, an emptied CLA
// after the clusters response that removes its cluster.

// next decides the response of type t, if one is due.
func (st *stream) next(t typ) *response {
	sb := st.subs[t]
	if sb == nil || st.view == nil || !st.srv.synced.Load() || !sb.due() {
		return nil
	}
	if t == tLbEndpoint {
		return st.nextCollections(sb)
	}
	resuming := sb.more
	// Not an answer to a first request, a forced one or a look at every name (a new view).
	looksAtChanges := sb.st.Responses > 0 && !sb.force && !sb.dirtyAll && len(sb.sweep) == 0
	st.planLEDS = false
	d, ok := sb.plan(st.limit(t), st)
	if !ok && !sb.pending() {
		sb.lag.settled()
	}
	if !ok {
		if t == tCluster && d.unchanged {
			// Nothing to remove after all: the endpoints held back need not wait.
			st.releaseDeferred()
		}
		return nil
	}
	r := st.seal(t, sb, d)
	r.resuming, r.delivers = resuming, looksAtChanges && onlyUpdates(r)
	sb.lag.planned(r, sb.pending() || r.more, st.takenAt)
	return r
}

// limit is the largest response of type t, where it may be split.
func (st *stream) limit(t typ) int { return st.srv.limits.ResponseBytes }

// seal versions and numbers a planned response and records it as sent.
func (st *stream) seal(t typ, sb *subscription, d draft) *response {
	slices.SortFunc(d.items, byID)
	r := &response{t: t, items: d.items, more: d.more}
	for _, id := range d.removed {
		// Strings: the stream may be the names' last holder.
		r.removed = append(r.removed, st.srv.names.name(id))
	}
	st.number(r)
	sb.record(&d, r.nonce, r.version, time.Now())
	st.srv.names.delivered(t, r.items, func(i int, c collections.Cause, first int64) {
		if r.items[i].update {
			r.addCause(c, first)
		}
	})
	switch t {
	case tEndpoint:
		st.ledsSent = st.planLEDS
	case tCluster:
		st.clustersSent(r)
	}
	return r
}

// number versions a response by its content and gives it the stream's next nonce.
func (st *stream) number(r *response) {
	r.version = responseVersion(r)
	st.nonce++
	r.nonce = strconv.FormatUint(st.nonce, 10)
}

// clustersSent applies a clusters response to the endpoints: Envoy warms the clusters sent and
// waits for their CLAs; on state of the world it asks again for them, and the next request is
// answered with every CLA it asks for; on delta it does not ask, and the CLA of every cluster sent
// is sent again (istiod's forceEDSPush sends every CLA after answering a clusters request). The
// clusters it removes are gone now: their emptied CLAs may follow.
func (st *stream) clustersSent(r *response) {
	eds := st.subs[tEndpoint]
	if eds == nil {
		return
	}
	if st.delta {
		ids := make([]nameID, len(r.items))
		for i, it := range r.items {
			ids[i] = it.id
		}
		eds.forceResend(ids)
	} else {
		eds.forceNext = true
	}
	st.releaseDeferred()
}

// releaseDeferred marks the endpoints held back for a clusters response to be looked at again.
func (st *stream) releaseDeferred() {
	if eds := st.subs[tEndpoint]; eds != nil && eds.releaseDeferred() {
		st.kick()
	}
}

// resolve implements lookup: the resource of a name for the stream's view, in the form the
// stream is sent.
func (st *stream) resolve(t typ, id nameID) (*collections.Resource, bool) {
	r, wait := st.srv.src.Resolve(st.view, t.url(), st.srv.names.name(id))
	r, leds := st.formFor(t, r)
	st.planLEDS = st.planLEDS || leds
	return r, wait
}

// list implements lookup: every resource of the type the stream's view sees.
func (st *stream) list(t typ) []*collections.Resource {
	return st.srv.src.List(st.view, t.url())
}

// leaving implements lookup: the emptied CLA r of a name must wait for the clusters response
// that removes its cluster, as istiod orders them, when the stream's client holds the cluster
// and either the source no longer has it (the clusters are looked at again now), or the source
// has no CLA of the name any more where the client held one (the cluster's removal is on its
// way: the clusters are looked at when it comes).
func (st *stream) leaving(id nameID, r *collections.Resource, held sub) bool {
	cds := st.subs[tCluster]
	if cds == nil || !cds.hasSent(id) {
		return false
	}
	if cr, pending := st.srv.src.Resolve(st.view, tCluster.url(), st.srv.names.name(id)); cr == nil && !pending {
		cds.dirtyAll = true
		st.kick() // the clusters, earlier in type order, are looked at at the next turn
		return true
	}
	return r.Absent && held.version != 0 && held.version != r.Version
}

// onlyUpdates reports whether every resource of a response is a newer version of one its client
// holds: a delivery of changes, not an answer to names newly subscribed or a forced resend.
func onlyUpdates(r *response) bool {
	for _, it := range r.items {
		if !it.update {
			return false
		}
	}
	return true
}
