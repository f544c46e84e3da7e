package xds

import (
	"slices"
	"sync"
)

// subscriberIndex is the server's one index of who holds what: per type and interned name, the
// streams that subscribe to it or hold it; per type, the streams subscribed to everything; and
// the subscribed names whose resources follow another name. A change of the source is turned
// into the streams it touches here (touched), and nowhere else. Streams are numbered by slot, a
// stream's bit in the sets.
//
// The index is shared by every stream, behind its lock; a stream's goroutine changes only its
// own entries. Lock order: the index's lock, then the name table's (taken inside it); no other
// lock is taken under either.
type subscriberIndex struct {
	names *nameTable
	// follows is Source.Follows.
	follows func(typeURL, name string) string

	mu sync.RWMutex
	// slots numbers the streams; free lists the slots of closed streams, reused first so that
	// the sets stay short.
	slots []*stream
	free  []uint32
	// subscribers indexes, per type and nameID, the streams subscribed to (or holding) each
	// name; wildcard lists the streams subscribed to all of a type.
	subscribers [numTypes][]connSet
	wildcard    [numTypes]map[*stream]struct{}
	// followers indexes, per type, the subscribed names whose resources follow another name
	// (Source.Follows), by that name; an entry lives as long as its name has subscribers.
	followers [numTypes]map[string][]nameID
}

func newSubscriberIndex(names *nameTable, follows func(typeURL, name string) string) *subscriberIndex {
	x := &subscriberIndex{names: names, follows: follows}
	for t := range numTypes {
		x.wildcard[t] = map[*stream]struct{}{}
		x.followers[t] = map[string][]nameID{}
	}
	return x
}

// addStream gives a new stream its slot.
func (x *subscriberIndex) addStream(st *stream) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if n := len(x.free); n > 0 {
		st.slot = x.free[n-1]
		x.free = x.free[:n-1]
		x.slots[st.slot] = st
		return
	}
	st.slot = uint32(len(x.slots))
	x.slots = append(x.slots, st)
}

// removeStream takes a closed stream out of the index, with the names it held (released: a
// server without streams holds no names), and frees its slot.
func (x *subscriberIndex) removeStream(st *stream, held *[numTypes][]nameID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for t := range numTypes {
		delete(x.wildcard[t], st)
		for _, id := range held[t] {
			x.unwatchLocked(typ(t), id, st)
		}
	}
	for t := range numTypes {
		for _, id := range held[t] {
			x.names.release(id)
		}
	}
	x.slots[st.slot] = nil
	x.free = append(x.free, st.slot)
}

// watch records that st holds the names ids of type t. Called before the stream's state records
// them, so that no change of a name can be missed.
func (x *subscriberIndex) watch(t typ, st *stream, ids ...nameID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, id := range ids {
		if n := int(id) + 1; n > len(x.subscribers[t]) {
			x.subscribers[t] = append(x.subscribers[t], make([]connSet, n-len(x.subscribers[t]))...)
		}
		set := &x.subscribers[t][id]
		if len(*set) == 0 {
			x.followLocked(t, id, true)
		}
		set.add(st.slot)
	}
}

// unwatch records that st no longer holds name id of type t.
func (x *subscriberIndex) unwatch(t typ, st *stream, id nameID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.unwatchLocked(t, id, st)
}

func (x *subscriberIndex) unwatchLocked(t typ, id nameID, st *stream) {
	if int(id) >= len(x.subscribers[t]) {
		return
	}
	set := &x.subscribers[t][id]
	if len(*set) == 0 {
		return
	}
	if set.remove(st.slot) {
		x.followLocked(t, id, false)
	}
}

// setWildcard records whether st subscribes to every name of type t.
func (x *subscriberIndex) setWildcard(t typ, st *stream, on bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if on {
		x.wildcard[t][st] = struct{}{}
	} else {
		delete(x.wildcard[t], st)
	}
}

// subscribersLocked is the set of streams holding name id of type t (x.mu held).
func (x *subscriberIndex) subscribersLocked(t typ, id nameID) connSet {
	if int(id) < len(x.subscribers[t]) {
		return x.subscribers[t][id]
	}
	return nil
}

// followLocked adds (on) or removes name id of type t from the followers of the name its
// resource follows, if any (x.mu held; the name is interned).
func (x *subscriberIndex) followLocked(t typ, id nameID, on bool) {
	leader := x.follows(t.url(), x.names.name(id))
	if leader == "" {
		return
	}
	fs := x.followers[t][leader]
	if on {
		x.followers[t][leader] = append(fs, id)
		return
	}
	if i := slices.Index(fs, id); i >= 0 {
		fs[i] = fs[len(fs)-1]
		fs = fs[:len(fs)-1]
	}
	if len(fs) == 0 {
		delete(x.followers[t], leader)
	} else {
		x.followers[t][leader] = fs
	}
}

// subscribersOf is the interned id of a name and the streams subscribed to it (explicitly or
// through a wildcard that holds it).
func (x *subscriberIndex) subscribersOf(t typ, name string) (nameID, []*stream) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	id, known := x.names.lookup(name)
	if !known {
		return 0, nil
	}
	var out []*stream
	x.subscribersLocked(t, id).each(func(slot uint32) { out = append(out, x.slots[slot]) })
	return id, out
}

// touch is a stream a change touches and the interned names it must look at again (nil: every
// name). Streams told of the same names share one slice of them: nobody writes to it.
type touch struct {
	st  *stream
	ids []nameID
}

// touches are the lists touched returns, reused once onChange has told every stream: a change
// of one name held by ten thousand streams would otherwise allocate a list as large each time.
var touches = sync.Pool{New: func() any { return new([]touch) }}

// touched is what a change of names of type t touches: the streams, each with the interned
// names it must look at again (nil: every name, for a wildcard stream and a name new to every
// stream); and the interned names changed (the names themselves and those that follow them),
// with their names. The list is from touches (give it back there).
func (x *subscriberIndex) touched(t typ, names []string) (streams *[]touch, ids []nameID, idNames []string) {
	streams = touches.Get().(*[]touch)
	out := (*streams)[:0]
	x.mu.RLock()
	defer x.mu.RUnlock()
	if len(names) == 1 && len(x.followers[t][names[0]]) == 0 && len(x.wildcard[t]) == 0 {
		// One name, which nothing follows, and no wildcard stream (a change of one service, the
		// common case): every stream holding it is told of it alone, through one shared slice.
		if id, known := x.names.lookup(names[0]); known {
			ids, idNames = []nameID{id}, names
			x.subscribersLocked(t, id).each(func(slot uint32) {
				out = append(out, touch{st: x.slots[slot], ids: ids})
			})
		}
		*streams = out
		return streams, ids, idNames
	}
	told := map[*stream][]nameID{}
	var everything []*stream // wildcard streams told of a name new to every stream
	for _, n := range names {
		id, known := x.names.lookup(n)
		if known {
			ids, idNames = append(ids, id), append(idNames, n)
			x.subscribersLocked(t, id).each(func(slot uint32) {
				c := x.slots[slot]
				told[c] = append(told[c], id)
			})
		}
		// The subscribed names whose resources follow n.
		for _, fid := range x.followers[t][n] {
			if !slices.Contains(ids, fid) {
				ids, idNames = append(ids, fid), append(idNames, x.names.name(fid))
			}
			x.subscribersLocked(t, fid).each(func(slot uint32) {
				c := x.slots[slot]
				if !slices.Contains(told[c], fid) {
					told[c] = append(told[c], fid)
				}
			})
		}
		for c := range x.wildcard[t] {
			if !known {
				// A resource new to every stream: the wildcard streams list everything again.
				everything = append(everything, c)
			} else if !slices.Contains(told[c], id) {
				told[c] = append(told[c], id)
			}
		}
	}
	for _, c := range everything {
		told[c] = nil // after the names known: nil stays "every name"
	}
	for c, cids := range told {
		out = append(out, touch{st: c, ids: cids})
	}
	*streams = out
	return streams, ids, idNames
}
