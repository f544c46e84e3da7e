package xds

import (
	"time"

	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

// sub is what a stream holds of one name of one type.
type sub struct {
	// version is what the client holds (0: nothing).
	version uint64
	// explicit: the client asked for the name (otherwise it came with a wildcard subscription).
	explicit bool
	// forced: the client needs the resource again whatever version it holds (the CLA of a
	// cluster it warms); cleared once a response sends it.
	forced bool
}

// subscription is one stream's subscription to one type: what its client asked for, what it
// holds of each name, where the exchange of responses and ACKs stands, and what must be looked
// at again. It is a plain value, owned by its stream's goroutine, with a small protocol API:
//
//   - apply (apply.go): a request's nonce (ACK, NACK, stale) and names (lists, wildcards, delta
//     subscriptions and initial versions);
//   - mark: names to look at again, for a change of the source;
//   - plan (plan.go): the next response, up to a size, its names resolved through the stream;
//   - record (plan.go): what a response sent, which the client now holds.
//
// The index and the name table it subscribes names in are the server's, shared by every stream.
type subscription struct {
	t     typ
	delta bool
	x     *subscriberIndex
	owner *stream

	wildcard bool
	subs     subSet
	// dirty names must be looked at again, each with the input change behind its mark (unix ns,
	// 0 if none: a new subscription); dirtyAll: every name (dirty then only carries times).
	dirty    map[nameID]int64
	dirtyAll bool
	// dirtyPeak is the most names dirty held at the start of a plan since it was made: the
	// size of the map, which does not shrink (an emptied one small enough goes back to the inbox).
	dirtyPeak int
	// sweep are the names a look at every name has still to look at (plan takes them a part at
	// a time, the last first).
	sweep []nameID
	// inflight: a response was sent and is neither ACKed nor NACKed; changes wait for it.
	inflight bool
	// force answers even if nothing changed: the first response, and endpoints after clusters.
	// Which resources are sent again unchanged is each name's forced mark, which stays until a
	// response sends it: a forced answer in parts carries every forced name, part after part.
	force bool
	// forceNext forces the answer to the next request (endpoints, after a clusters response),
	// with every name the client asked for.
	forceNext bool
	// more: the last response was a part of an answer with more to follow; its next part goes
	// ahead of new answers in the send budget.
	more bool
	// members are, for LEDS, what the client holds of each collection subscribed to.
	members map[nameID]heldCollection
	// deferred are, for endpoints, the names whose cluster is being removed: their emptied CLA
	// waits for the clusters response that removes the cluster, as istiod sends them.
	deferred map[nameID]int64
	// listHash is, on state of the world, the hash of the names of the last request applied
	// (listed: there was one): an ACK repeating them changes nothing.
	listHash uint64
	listed   bool
	st       xdsdebug.TypeStatus
	// lag is how far the client is behind what it subscribes to (behind.go).
	lag lag
}

func newSubscription(t typ, owner *stream, x *subscriberIndex, vt *versionTable) *subscription {
	return &subscription{t: t, delta: owner.delta, owner: owner, x: x, force: true, subs: newSubSet(vt), lag: newLag(time.Now().UnixNano())}
}

// mark records that names must be looked at again, each for an input change at a time (unix
// ns); a name marked before it is sent keeps its earliest change's time, the first the client
// has not been sent.
func (sb *subscription) mark(ids map[nameID]int64, all bool) {
	if all {
		sb.dirtyAll = true
	}
	if len(ids) > 0 || all {
		sb.lag.marked(ids)
	}
	if len(ids) == 0 {
		return
	}
	if sb.dirty == nil {
		sb.dirty = ids
		return
	}
	for id, at := range ids {
		if old, marked := sb.dirty[id]; !marked || old == 0 || (at != 0 && at < old) {
			sb.dirty[id] = at
		}
	}
	sb.owner.inbox.recycle(sb.t, ids, len(ids))
}

// forceResend marks names the client holds to be sent again, whatever version it holds, and to
// be looked at (the CLAs of the clusters a delta response sent: Envoy warms them).
func (sb *subscription) forceResend(ids []nameID) {
	for _, id := range ids {
		held, ok := sb.subs.get(id)
		if !ok || held.version == 0 || held.forced {
			continue
		}
		held.forced = true
		sb.subs.set(id, held)
		if sb.dirty == nil {
			sb.dirty = map[nameID]int64{}
		}
		if _, marked := sb.dirty[id]; !marked {
			sb.dirty[id] = 0
		}
	}
}

// releaseDeferred marks the names held back for a clusters response to be looked at again
// (endpoints), and reports whether there were any.
func (sb *subscription) releaseDeferred() bool {
	if len(sb.deferred) == 0 {
		return false
	}
	if sb.dirty == nil {
		sb.dirty = map[nameID]int64{}
	}
	for id, at := range sb.deferred {
		sb.dirty[id] = at
	}
	sb.deferred = nil
	return true
}

// due reports whether a response may be due: nothing awaits an ACK, and something is to be
// looked at.
func (sb *subscription) due() bool { return !sb.inflight && sb.pending() }

// pending reports whether something is to be looked at, or held back for a clusters response.
func (sb *subscription) pending() bool {
	return sb.force || sb.dirtyAll || len(sb.dirty) > 0 || len(sb.sweep) > 0 || len(sb.deferred) > 0
}

// ended forgets every name, returning them (the stream has closed; the caller takes them out of
// the index and releases them).
func (sb *subscription) ended() []nameID {
	var held []nameID
	sb.subs.each(func(id nameID, _ sub) { held = append(held, id) })
	sb.subs.reset()
	return held
}

// eachExplicit calls f with each name the client asked for.
func (sb *subscription) eachExplicit(f func(id nameID)) {
	sb.subs.each(func(id nameID, held sub) {
		if held.explicit {
			f(id)
		}
	})
}

// hasSent reports whether the client holds a version of id.
func (sb *subscription) hasSent(id nameID) bool {
	held, ok := sb.subs.get(id)
	return ok && held.version != 0
}
