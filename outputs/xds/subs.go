package xds

import (
	"slices"
)

// subSet is what a stream holds of the names of one type: 8 bytes a name, its id and flags and
// the interned version its client holds (a map took about 50 at 1 000 names). Entries are kept sorted by id, with a short unsorted tail of recent additions
// merged in when it fills. Removal marks an entry; marked entries are dropped when the tail is
// merged or when they outnumber the live ones. Past subSmallMax names (clients that subscribe to
// many thousands) it turns into a map, so that no order of additions costs more than a map's.
type subSet struct {
	e []subEntry
	// sorted is the length of the sorted prefix of e; e[sorted:] is the tail.
	sorted int
	// live counts the unmarked entries; dead the marked ones.
	live, dead int
	// big holds the names instead of e once there are more than subSmallMax (with the versions
	// themselves: no reference to the table is held for them).
	big map[nameID]sub
	// vt interns the versions of the packed form; the set holds a reference to each of its
	// entries' versions.
	vt *versionTable
}

func newSubSet(vt *versionTable) subSet { return subSet{vt: vt} }

// subEntry packs an id, its flags and an interned version in 8 bytes.
type subEntry struct {
	idf uint32 // the nameID, and the flags below
	ver versionID
}

const (
	subExplicit uint32 = 1 << 31
	subDead     uint32 = 1 << 30
	subForced   uint32 = 1 << 29
	subIDMask          = subForced - 1
	// subTail is the longest unsorted tail: lookups scan it.
	subTail = 64
	// subRoom is the least spare room compact leaves.
	subRoom = 8
	// subSmallMax is the most names kept in the packed form: every stream's, as one stream
	// holds at most MaxSubscriptions names a type (a proxy asking for every cluster of a large
	// mesh holds tens of thousands, 8 bytes each).
	subSmallMax = MaxSubscriptions
)

func (e subEntry) id() nameID { return nameID(e.idf & subIDMask) }
func (e subEntry) dead() bool { return e.idf&subDead != 0 }

func (s *subSet) sub(e subEntry) sub {
	return sub{version: s.vt.version(e.ver), explicit: e.idf&subExplicit != 0, forced: e.idf&subForced != 0}
}

// entryOf packs a name's state, taking a reference to its version.
func (s *subSet) entryOf(id nameID, v sub) subEntry {
	e := subEntry{idf: uint32(id) & subIDMask, ver: s.vt.acquire(v.version)}
	if v.explicit {
		e.idf |= subExplicit
	}
	if v.forced {
		e.idf |= subForced
	}
	return e
}

// find returns the index of id's live entry, or -1.
func (s *subSet) find(id nameID) int {
	if uint32(id) > subIDMask {
		return -1 // never held in the packed form
	}
	if i, ok := slices.BinarySearchFunc(s.e[:s.sorted], id, func(e subEntry, id nameID) int {
		return int(e.id()) - int(id)
	}); ok && !s.e[i].dead() {
		return i
	}
	for i := s.sorted; i < len(s.e); i++ {
		if s.e[i].id() == id && !s.e[i].dead() {
			return i
		}
	}
	return -1
}

// get returns what the stream holds of id.
func (s *subSet) get(id nameID) (sub, bool) {
	if s.big != nil {
		v, ok := s.big[id]
		return v, ok
	}
	if i := s.find(id); i >= 0 {
		return s.sub(s.e[i]), true
	}
	return sub{}, false
}

// has reports whether the stream holds id.
func (s *subSet) has(id nameID) bool {
	_, ok := s.get(id)
	return ok
}

// set records what the stream holds of id, adding it when new.
func (s *subSet) set(id nameID, v sub) {
	if s.big == nil && uint32(id) > subIDMask {
		s.toMap() // an id the packed form cannot hold (more than 2^29 names were ever interned)
	}
	if s.big != nil {
		s.big[id] = v
		return
	}
	if i := s.find(id); i >= 0 {
		old := s.e[i].ver
		s.e[i] = s.entryOf(id, v)
		s.vt.release(old)
		return
	}
	s.e = append(s.e, s.entryOf(id, v))
	s.live++
	if s.live > subSmallMax {
		s.toMap()
		return
	}
	if len(s.e)-s.sorted > subTail {
		s.merge()
	}
}

// holdVersions records, for n names, that the client holds version v of name id (at(i) gives
// both; its forced mark cleared, its other flags kept; a name the set does not hold is added, not
// explicit), telling was each name's previous version (0: none). It holds the version table's
// lock once for the names it holds: a response of many CLAs took it three times a name (reading
// the held version, taking the new one, dropping the old), each time contended by every stream.
func (s *subSet) holdVersions(n int, at func(i int) (nameID, uint64), was func(i int, old uint64)) {
	var missing []int
	if s.big == nil {
		s.vt.mu.Lock()
		for i := 0; i < n; i++ {
			id, v := at(i)
			j := s.find(id)
			if j < 0 {
				missing = append(missing, i)
				continue
			}
			old := s.e[j]
			was(i, s.vt.versionLocked(old.ver))
			s.e[j] = subEntry{idf: old.idf &^ subForced, ver: s.vt.acquireLocked(v)}
			s.vt.releaseLocked(old.ver)
		}
		s.vt.mu.Unlock()
	} else {
		missing = make([]int, n)
		for i := range missing {
			missing[i] = i
		}
	}
	for _, i := range missing {
		id, v := at(i)
		held, _ := s.get(id)
		was(i, held.version)
		held.version, held.forced = v, false
		s.set(id, held)
	}
}

// addAll adds ids the set does not hold, all with v: appended to the tail and merged once, so
// that a request of thousands of names costs a sort, not a merge every subTail names.
func (s *subSet) addAll(ids []nameID, v sub) {
	if s.big == nil && s.live+len(ids) > subSmallMax {
		s.toMap()
	}
	for _, id := range ids {
		if s.big == nil && uint32(id) > subIDMask {
			s.toMap()
		}
		if s.big != nil {
			s.big[id] = v
			continue
		}
		s.e = append(s.e, s.entryOf(id, v))
		s.live++
	}
	if s.big == nil && len(s.e)-s.sorted > subTail {
		s.merge()
	}
}

// del forgets id. It may be called while iterating with each.
func (s *subSet) del(id nameID) bool {
	if s.big != nil {
		_, ok := s.big[id]
		delete(s.big, id)
		return ok
	}
	i := s.find(id)
	if i < 0 {
		return false
	}
	s.e[i].idf |= subDead
	s.vt.release(s.e[i].ver)
	s.e[i].ver = 0
	s.live--
	s.dead++
	return true
}

// len is the number of names held.
func (s *subSet) len() int {
	if s.big != nil {
		return len(s.big)
	}
	return s.live
}

// each calls f for every name held, in no particular order. f may change or delete the entry it
// is given, not add names.
func (s *subSet) each(f func(id nameID, v sub)) {
	if s.big != nil {
		for id, v := range s.big {
			f(id, v)
		}
		return
	}
	for i := 0; i < len(s.e); i++ {
		if e := s.e[i]; !e.dead() {
			f(e.id(), s.sub(e))
		}
	}
	if s.dead > s.live {
		s.merge()
	}
}

// toMap moves the names into a map, releasing their interned versions.
func (s *subSet) toMap() {
	big := make(map[nameID]sub, s.live)
	for _, e := range s.e {
		if !e.dead() {
			big[e.id()] = s.sub(e)
			s.vt.release(e.ver)
		}
	}
	*s = subSet{big: big, vt: s.vt}
}

// reset forgets every name, releasing their interned versions.
func (s *subSet) reset() {
	for _, e := range s.e {
		if !e.dead() {
			s.vt.release(e.ver)
		}
	}
	*s = subSet{vt: s.vt}
}

// compact gives back the room a burst of additions left (a slice grows by a quarter past a few
// hundred entries): called once a request or a response has been applied, it keeps the spare
// capacity within an eighth of the names and twice subRoom. The allocator rounds an array up to
// its size class, which can leave up to an eighth spare by itself: a tighter bound would merge
// again, allocating, at every call on a set the rounding put just past it (every response of a
// proxy holding 200 names did).
func (s *subSet) compact() {
	if s.big == nil && cap(s.e)-s.live > s.live/8+2*subRoom {
		s.mergeWith(subRoom)
	}
}

// merge sorts the tail into the prefix and drops the marked entries, leaving room for a tail.
func (s *subSet) merge() { s.mergeWith(subTail) }

// mergeWith sorts the tail into the prefix and drops the marked entries, in an array with room for
// at least room more: the tail is sorted on its own and the two runs merged, O(names).
func (s *subSet) mergeWith(room int) {
	byID := func(a, b subEntry) int { return int(a.id()) - int(b.id()) }
	tail := slices.Clone(s.e[s.sorted:])
	slices.SortFunc(tail, byID)
	prefix := s.e[:s.sorted]
	out := slices.Grow([]subEntry(nil), s.live+room) // rounded up to the allocator's size class
	i, j := 0, 0
	for i < len(prefix) || j < len(tail) {
		var e subEntry
		if j == len(tail) || (i < len(prefix) && byID(prefix[i], tail[j]) <= 0) {
			e, i = prefix[i], i+1
		} else {
			e, j = tail[j], j+1
		}
		if !e.dead() {
			out = append(out, e)
		}
	}
	s.e = out
	s.sorted, s.dead = len(s.e), 0
}
