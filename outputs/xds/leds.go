package xds

import (
	"time"

	"go.uber.org/zap"

	"github.com/krteds/krteds/collections"
)

// CollectionSource is a Source that also serves glob collections (LEDS): the members of a
// collection a proxy of view v sees. With a nil collection, pending says whether the view's CLA
// naming it is being computed (a Change naming the collection follows) rather than naming it
// not. A Change of the collection's type naming the collection says its members changed.
type CollectionSource interface {
	ResolveCollection(v *collections.View, typeURL, glob string) (c *collections.LEDSCollection, pending bool)
}

// heldCollection is what a stream's client holds of a collection: the members of the version
// of it last sent (an immutable value of the source's; the stream keeps it until the client is
// brought to a newer one). Members are not interned or indexed one by one: a collection is
// compared with the version the client holds as a whole.
type heldCollection struct {
	col *collections.LEDSCollection
}

// typeLbEndpoint is the type of LEDS resources: endpoints named in glob collections, served on
// delta streams only.
const typeLbEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint"

// formFor is the resource the stream is sent for r, and whether it is a LEDS form: the LEDS
// form of a ClusterLoadAssignment that has one, to an Envoy on a delta stream (glob collections
// exist only in delta xDS, and gRPC clients do not read LEDS) that has not rejected one; r
// otherwise.
func (st *stream) formFor(t typ, r *collections.Resource) (*collections.Resource, bool) {
	if t == tEndpoint && r != nil && r.LEDS != nil && st.delta && !st.noLEDS && st.view != nil && !st.view.GRPC {
		return r.LEDS.CLA, true
	}
	return r, false
}

// rejectedLEDS handles a rejected response of endpoints: if it held a LEDS form, the client may
// not read LEDS (an Envoy without it), so the stream sends whole CLAs from then on, starting
// with every CLA it holds.
func (st *stream) rejectedLEDS(sb *subscription) {
	if !st.ledsSent || st.noLEDS {
		return
	}
	st.noLEDS = true
	sb.dirtyAll = true
	st.srv.log.Info("xDS client rejected a CLA of LEDS collections; sending it whole CLAs", zap.String("conn", st.id),
		zap.String("node", clip(st.proxyID())))
}

// nextCollections decides the response of LEDS resources. Each collection the stream subscribes
// to and that must be looked at is resolved for the stream's view and compared with the version
// the client holds: the members that changed or joined are sent, those gone are removed. A
// collection the view does not have lists nothing; one whose CLA is being computed for the view
// (after a change of the proxy's class) waits, as a pending CLA does.
func (st *stream) nextCollections(sb *subscription) *response {
	cs, ok := st.srv.src.(CollectionSource)
	if !ok {
		sb.dirty, sb.dirtyAll, sb.force = nil, false, false
		return nil
	}
	globs, times := sb.collectionsDue()
	resp := &response{t: tLbEndpoint}
	for _, glob := range globs {
		col, pending := cs.ResolveCollection(st.view, typeLbEndpoint, st.srv.names.name(glob))
		if pending {
			if sb.dirty == nil {
				sb.dirty = map[nameID]int64{}
			}
			sb.dirty[glob] = times[glob]
			continue
		}
		held := sb.members[glob].col
		if col == held {
			continue
		}
		diffCollection(held, col, func(m *collections.Resource, update bool) {
			resp.items = append(resp.items, item{id: glob, res: m, update: update, at: times[glob]})
		}, func(name string) {
			resp.removed = append(resp.removed, name)
		})
		sb.holdCollection(glob, col)
	}
	if len(resp.items) == 0 && len(resp.removed) == 0 && !sb.force {
		return nil
	}
	st.number(resp)
	sb.sent(resp.nonce, resp.version, time.Now(), false)
	return resp
}

// collectionsDue are the collections to look at (every one asked for, or those marked), with
// the input change behind each mark; the marks are taken.
func (sb *subscription) collectionsDue() ([]nameID, map[nameID]int64) {
	var globs []nameID
	if sb.force || sb.dirtyAll {
		sb.eachExplicit(func(id nameID) { globs = append(globs, id) })
	} else {
		for id := range sb.dirty {
			if held, ok := sb.subs.get(id); ok && held.explicit {
				globs = append(globs, id)
			}
		}
	}
	times := sb.dirty
	sb.dirty, sb.dirtyAll = nil, false
	return globs, times
}

// holdCollection records the version of a collection the client holds once sent.
func (sb *subscription) holdCollection(glob nameID, col *collections.LEDSCollection) {
	if col == nil || len(col.Members) == 0 {
		delete(sb.members, glob)
		return
	}
	if sb.members == nil {
		sb.members = map[nameID]heldCollection{}
	}
	sb.members[glob] = heldCollection{col: col}
}

// diffCollection calls send with every member of cur that old (the version the client holds;
// either may be nil) does not have in the same version, and remove with the name of every member
// of old that cur does not have. Members keep their order between versions, so the two lists are
// walked side by side until they disagree on a name.
func diffCollection(old, cur *collections.LEDSCollection, send func(m *collections.Resource, update bool), remove func(name string)) {
	var was, is []*collections.Resource
	if old != nil {
		was = old.Members
	}
	if cur != nil {
		is = cur.Members
	}
	i := 0
	for ; i < len(was) && i < len(is) && was[i].Name == is[i].Name; i++ {
		if was[i].Version != is[i].Version {
			send(is[i], true)
		}
	}
	if i == len(was) && i == len(is) {
		return
	}
	rest := make(map[string]uint64, len(was)-i)
	for _, m := range was[i:] {
		rest[m.Name] = m.Version
	}
	for _, m := range is[i:] {
		v, ok := rest[m.Name]
		if !ok || v != m.Version {
			send(m, ok)
		}
		delete(rest, m.Name)
	}
	for _, m := range was[i:] {
		if _, ok := rest[m.Name]; ok {
			remove(m.Name)
		}
	}
}
