package xds

import (
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

// formFor is the resource a stream is sent for r, and whether it is a LEDS form: the LEDS form
// of a ClusterLoadAssignment that has one, to an Envoy on a delta stream (glob collections exist
// only in delta xDS, and gRPC clients do not read LEDS) that has not rejected one; r otherwise.
func formFor(c *conn, t typ, r *collections.Resource) (*collections.Resource, bool) {
	if t == tEndpoint && r != nil && r.LEDS != nil && c.delta && !c.noLEDS && c.view != nil && !c.view.GRPC {
		return r.LEDS.CLA, true
	}
	return r, false
}

// rejectedLEDS handles a rejected response of endpoints (c.mu held): if it held a LEDS form, the
// client may not read LEDS (an Envoy without it), so the stream sends whole CLAs from then on,
// starting with every CLA it holds.
func (s *Server) rejectedLEDS(c *conn, st *subscription) {
	if !c.ledsSent || c.noLEDS {
		return
	}
	c.noLEDS = true
	st.dirtyAll = true
	s.log.Info("xDS client rejected a CLA of LEDS collections; sending it whole CLAs", zap.String("conn", c.id),
		zap.String("node", clip(c.proxyID())))
}

// nextCollections decides the response of LEDS resources (c.mu held). Each collection the stream
// subscribes to and that must be looked at is resolved for the stream's view and compared with
// the version the client holds: the members that changed or joined are sent, those gone are
// removed. A collection the view does not have lists nothing; one whose CLA is being computed
// for the view (after a change of the proxy's class) waits, as a pending CLA does.
func (s *Server) nextCollections(c *conn, st *subscription) *response {
	cs, ok := s.src.(CollectionSource)
	if !ok {
		st.dirty, st.dirtyAll, st.force = nil, false, false
		return nil
	}
	var globs []nameID
	if st.force || st.dirtyAll {
		st.eachExplicit(func(id nameID) { globs = append(globs, id) })
	} else {
		for id := range st.dirty {
			if sb, held := st.subs.get(id); held && sb.explicit {
				globs = append(globs, id)
			}
		}
	}
	times := st.dirty
	st.dirty, st.dirtyAll = nil, false
	resp := &response{t: tLbEndpoint}
	for _, glob := range globs {
		col, pending := cs.ResolveCollection(c.view, typeLbEndpoint, s.names.name(glob))
		if pending {
			if st.dirty == nil {
				st.dirty = map[nameID]int64{}
			}
			st.dirty[glob] = times[glob]
			continue
		}
		held := st.members[glob].col
		if col == held {
			continue
		}
		diffCollection(held, col, func(m *collections.Resource, update bool) {
			resp.items = append(resp.items, item{id: glob, res: m, update: update, at: times[glob]})
		}, func(name string) {
			resp.removed = append(resp.removed, name)
		})
		if col == nil || len(col.Members) == 0 {
			delete(st.members, glob)
			continue
		}
		if st.members == nil {
			st.members = map[nameID]heldCollection{}
		}
		st.members[glob] = heldCollection{col: col}
	}
	if len(resp.items) == 0 && len(resp.removed) == 0 && !st.force {
		return nil
	}
	st.force = false
	return s.seal(c, tLbEndpoint, st, resp)
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
