package xds

import (
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What a request does to a subscription (apply): its nonce read against the response it answers
// (ACK, NACK, stale), then its names — a state-of-the-world list, a wildcard, a delta request's
// subscriptions, unsubscriptions and initial versions — interned, indexed and held.

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
	// The names held that the list keeps (want), to release the others: none when nothing is
	// held (a stream's first list), and then no map of every name is built.
	var want map[nameID]struct{}
	var added []string
	if sb.subs.len() > 0 {
		want = make(map[nameID]struct{}, len(names))
	} else {
		added = make([]string, 0, len(names))
	}
	for _, n := range names {
		if n == "*" {
			continue
		}
		if want != nil {
			if id, ok := sb.x.names.lookup(n); ok {
				if held, ok := sb.subs.get(id); ok && held.explicit {
					want[id] = struct{}{}
					continue
				}
			}
		}
		added = append(added, n)
	}
	ids, err := sb.add(added)
	if err != nil || want == nil {
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
	fresh := make([]nameID, 0, len(ids))
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
		sb.sweep = slices.Grow(sb.sweep, len(seen))
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

// checkNames refuses a name longer than MaxNameBytes.
func checkNames(names []string) error {
	for _, n := range names {
		if len(n) > MaxNameBytes {
			return status.Errorf(codes.InvalidArgument, "a resource name of %d bytes; at most %d", len(n), MaxNameBytes)
		}
	}
	return nil
}
