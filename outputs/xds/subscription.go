package xds

import (
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
//   - apply: a request's nonce (ACK, NACK, stale) and names (lists, wildcards, delta
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

// reply is what a request's nonce says of the response it answers.
type reply int

const (
	// replyNone: a new request (the first of its type on the stream, or without a nonce).
	replyNone reply = iota
	replyACK
	replyNACK
	// replyStale: it answers an older response than the latest.
	replyStale
)

// apply applies a request: its nonce to the exchange, then its names to the subscription. A
// state-of-the-world request answering an older response is ignored: the client will answer the
// newest one with its full subscription; a delta request's changes apply whatever it answers.
func (sb *subscription) apply(req request, first bool) (reply, error) {
	r := sb.replyOf(req, first)
	defer sb.subs.compact()
	if req.delta {
		return r, sb.applyDelta(req, first)
	}
	if r == replyStale {
		return r, nil
	}
	if err := sb.applySotw(req, first); err != nil {
		return r, err
	}
	if sb.t == tEndpoint && sb.forceNext {
		sb.force, sb.forceNext = true, false
		sb.subs.each(func(id nameID, held sub) {
			if !held.forced {
				held.forced = true
				sb.subs.set(id, held)
			}
		})
	}
	return r, nil
}

// replyOf reads a request's nonce. The first request of a type on a stream is a new
// subscription whatever nonce it carries, as istiod's shouldRespond takes it: an Envoy before
// 1.29 reconnecting sends the previous stream's nonce and version with it (envoyproxy/envoy#30155).
func (sb *subscription) replyOf(req request, first bool) reply {
	switch {
	case first || req.nonce == "":
		return replyNone
	case req.nonce != sb.st.SentNonce:
		return replyStale
	}
	sb.inflight = false
	if e := req.errorDetail; e != nil {
		sb.st.NACKs++
		sb.st.LastError = clip(e.GetMessage())
		return replyNACK
	}
	sb.st.AckedNonce, sb.st.AckedVersion, sb.st.LastError = sb.st.SentNonce, sb.st.SentVersion, ""
	return replyACK
}

// applySotw makes the subscription the request's list. Every ACK repeats the whole list: the
// list of the previous request again changes nothing, and is told by its hash without reading
// its names.
func (sb *subscription) applySotw(req request, first bool) error {
	t := sb.t
	if req.list.n > MaxSubscriptions {
		return status.Errorf(codes.InvalidArgument, "%d %s names in one request; at most %d", req.list.n, t.short(), MaxSubscriptions)
	}
	if !first && sb.listed && req.list.hash == sb.listHash {
		return nil
	}
	names, err := req.names(sb.x.names)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%s request: %v", t.short(), err)
	}
	sb.listed, sb.listHash = true, req.list.hash
	// An empty list is a wildcard on a first request of the types that had one before "*"
	// (legacy), and keeps a wildcard subscription; "*" subscribes to everything.
	wildcard := (first && len(names) == 0 && t.legacyWildcard()) || slices.Contains(names, "*") || (sb.wildcard && len(names) == 0)
	if wildcard != sb.wildcard {
		sb.dirtyAll = true
		sb.setWildcard(wildcard)
	}
	if err := checkNames(names); err != nil {
		return err
	}
	want := make(map[nameID]struct{}, len(names))
	var added []string
	for _, n := range names {
		if n == "*" {
			continue
		}
		if id, ok := sb.x.names.lookup(n); ok {
			if held, ok := sb.subs.get(id); ok && held.explicit {
				want[id] = struct{}{}
				continue
			}
		}
		added = append(added, n)
	}
	ids, err := sb.add(added)
	if err != nil {
		return err
	}
	for _, id := range ids {
		want[id] = struct{}{}
	}
	sb.subs.each(func(id nameID, held sub) {
		if _, ok := want[id]; !ok && held.explicit {
			sb.release(id, held)
		}
	})
	return nil
}

// applyDelta applies a delta request's subscription changes. On the first request of a type the
// initial versions say what the client holds already (a client coming back to this or another
// replica), and an empty subscription is a wildcard for the types that had one before "*".
func (sb *subscription) applyDelta(req request, first bool) error {
	t := sb.t
	if len(req.subscribe)+sb.subs.len() > MaxSubscriptions {
		return status.Errorf(codes.InvalidArgument, "more than %d %s names on one stream", MaxSubscriptions, t.short())
	}
	if err := checkNames(req.subscribe); err != nil {
		return err
	}
	if first {
		if (len(req.subscribe) == 0 && t.legacyWildcard()) || slices.Contains(req.subscribe, "*") {
			sb.setWildcard(true)
		}
		if err := sb.holdInitial(req.initial); err != nil {
			return err
		}
	} else if slices.Contains(req.subscribe, "*") && !sb.wildcard {
		sb.dirtyAll = true
		sb.setWildcard(true)
	}
	if len(req.subscribe) > 0 {
		if _, err := sb.add(slices.DeleteFunc(slices.Clone(req.subscribe), func(n string) bool { return n == "*" })); err != nil {
			return err
		}
	}
	for _, n := range req.unsubscribe {
		if n == "*" {
			sb.setWildcard(false)
			continue
		}
		if id, ok := sb.x.names.lookup(n); ok {
			if held, ok := sb.subs.get(id); ok {
				if t == tLbEndpoint && held.explicit {
					delete(sb.members, id) // the client forgets the collection's members with it
				}
				sb.release(id, held)
			}
		}
	}
	return nil
}

// holdInitial records the versions a delta client says it holds (at most MaxSubscriptions).
func (sb *subscription) holdInitial(iv map[string]string) error {
	if len(iv) == 0 {
		return nil
	}
	names := make([]string, 0, min(len(iv), MaxSubscriptions))
	for n := range iv {
		if len(names) == MaxSubscriptions {
			break
		}
		names = append(names, n)
	}
	if err := checkNames(names); err != nil {
		return err
	}
	ids, err := sb.acquire(names)
	if err != nil {
		return err
	}
	if err := sb.owner.charge(sb.x.names, ids); err != nil {
		for _, id := range ids {
			sb.x.names.release(id)
		}
		return err
	}
	sb.x.watch(sb.t, sb.owner, ids...)
	for i, id := range ids {
		ver, _ := parseVersion(iv[names[i]])
		sb.subs.set(id, sub{version: ver, explicit: !sb.wildcard})
	}
	return nil
}

// setWildcard subscribes to every name of the type, or ends that: the names held only through
// the wildcard are then dropped.
func (sb *subscription) setWildcard(on bool) {
	if on == sb.wildcard {
		return
	}
	sb.wildcard = on
	sb.x.setWildcard(sb.t, sb.owner, on)
	if !on {
		sb.subs.each(func(id nameID, held sub) {
			if !held.explicit {
				sb.drop(id)
			}
		})
	}
}

// acquire interns names of the stream's client and takes a reference to each, within the
// caller's bound (nameTable.acquireFor).
func (sb *subscription) acquire(names []string) ([]nameID, error) {
	return sb.x.names.acquireFor(sb.owner.caller, names)
}

// add subscribes to names explicitly and marks them to be looked at, interning and indexing
// them under one lock each. The index is updated before the state, so no change of a name can
// be missed.
func (sb *subscription) add(names []string) ([]nameID, error) {
	ids, err := sb.acquire(names)
	if err != nil {
		return nil, err
	}
	var fresh []nameID
	seen := make(map[nameID]struct{}, len(ids))
	for _, id := range ids {
		if _, dup := seen[id]; dup {
			sb.x.names.release(id) // named twice in the request
			continue
		}
		seen[id] = struct{}{}
		if held, ok := sb.subs.get(id); ok {
			sb.x.names.release(id)
			held.explicit = true
			sb.subs.set(id, held)
			continue
		}
		fresh = append(fresh, id)
	}
	if err := sb.owner.charge(sb.x.names, fresh); err != nil {
		for _, id := range fresh {
			sb.x.names.release(id)
		}
		return nil, err
	}
	if len(seen) > 0 {
		sb.lag.asked(time.Now().UnixNano())
	}
	if len(fresh) > 0 {
		sb.x.watch(sb.t, sb.owner, fresh...)
		sb.subs.addAll(fresh, sub{explicit: true})
	}
	if sb.t.splittable(sb.delta) {
		// Swept (4 bytes a name) rather than marked (a map entry each): a first subscription
		// of every cluster of a large mesh, held until its last part is sent, by every stream
		// of a herd.
		for id := range seen {
			sb.sweep = append(sb.sweep, id)
		}
		return ids, nil
	}
	if sb.dirty == nil {
		sb.dirty = make(map[nameID]int64, len(seen))
	}
	for id := range seen {
		if _, marked := sb.dirty[id]; !marked {
			sb.dirty[id] = 0
		}
	}
	return ids, nil
}

// hold adds a name held through the wildcard subscription (a name of the source's: it counts
// for the stream, and for no caller). The index is updated before the state, so no change of
// the name can be missed.
func (sb *subscription) hold(name string) nameID {
	id := sb.x.names.acquire(name)
	sb.owner.nameBytes += int64(len(name))
	sb.x.watch(sb.t, sb.owner, id)
	sb.subs.set(id, sub{})
	return id
}

// release ends a name's explicit subscription: under a wildcard the name stays, held through it;
// otherwise it is dropped.
func (sb *subscription) release(id nameID, held sub) {
	if sb.wildcard {
		held.explicit = false
		sb.subs.set(id, held)
		return
	}
	sb.drop(id)
}

// drop forgets a name.
func (sb *subscription) drop(id nameID) {
	if !sb.subs.del(id) {
		return
	}
	sb.owner.uncharge(sb.x.names, id)
	sb.x.unwatch(sb.t, sb.owner, id)
	sb.x.names.release(id)
}

// holds reports whether the subscription holds id, explicitly or through the wildcard.
func (sb *subscription) holds(id nameID) bool { return sb.subs.has(id) }

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

// checkNames refuses a name longer than MaxNameBytes.
func checkNames(names []string) error {
	for _, n := range names {
		if len(n) > MaxNameBytes {
			return status.Errorf(codes.InvalidArgument, "a resource name of %d bytes; at most %d", len(n), MaxNameBytes)
		}
	}
	return nil
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
