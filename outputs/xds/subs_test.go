package xds

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// subSet behaves as the map it replaces, through random additions, updates, removals (also while
// iterating) and lookups, with ids arriving in any order; the version table holds a reference for
// each entry with a version, and nothing once the set is reset.
func TestSubSetIsAMap(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 52; round++ {
		vt := newVersionTable()
		s := newSubSet(vt)
		m := map[nameID]sub{}
		span := 1 + r.IntN(500)
		if round >= 50 {
			// Past the packed form's size: the set turns into a map on the way.
			span = subSmallMax + 500
			for i := 0; i < subSmallMax-10; i++ {
				v := sub{version: uint64(i) + 1}
				s.set(nameID(i), v)
				m[nameID(i)] = v
			}
		}
		for op := 0; op < 3000; op++ {
			id := nameID(r.IntN(span))
			switch k := r.IntN(10); {
			case k < 5:
				// Few distinct versions, so that entries share them; 0 is holding nothing.
				v := sub{version: uint64(r.IntN(20)), explicit: r.IntN(2) == 0}
				if r.IntN(2) == 0 {
					v.version = r.Uint64()
				}
				s.set(id, v)
				m[id] = v
			case k < 8:
				_, in := m[id]
				if got := s.del(id); got != in {
					t.Fatalf("round %d: del(%d) = %v, map has it: %v", round, id, got, in)
				}
				delete(m, id)
			default:
				// Iterate, dropping some and rewriting others, as the server does.
				seen := map[nameID]bool{}
				s.each(func(id nameID, v sub) {
					if seen[id] {
						t.Fatalf("round %d: %d visited twice", round, id)
					}
					seen[id] = true
					if want, ok := m[id]; !ok || want != v {
						t.Fatalf("round %d: each gave %d=%+v, map has %+v (%v)", round, id, v, want, ok)
					}
					switch r.IntN(3) {
					case 0:
						s.del(id)
						delete(m, id)
					case 1:
						v.explicit = !v.explicit
						s.set(id, v)
						m[id] = v
					}
				})
				if len(seen) != len(m)+countDeletedDuring(seen, m) {
					t.Fatalf("round %d: each visited %d, map holds %d", round, len(seen), len(m))
				}
			}
			if op%97 == 0 {
				s.compact() // as after each request and response
			}
			if s.len() != len(m) {
				t.Fatalf("round %d op %d: len %d, map %d", round, op, s.len(), len(m))
			}
			if v, ok := s.get(id); ok != (m[id] != sub{} || func() bool { _, ok := m[id]; return ok }()) || (ok && v != m[id]) {
				t.Fatalf("round %d: get(%d) = %+v %v, map %+v", round, id, v, ok, m[id])
			}
		}
		refs := map[uint64]uint32{}
		for id, v := range m {
			if got, ok := s.get(id); !ok || got != v {
				t.Fatalf("round %d: %d is %+v %v, want %+v", round, id, got, ok, v)
			}
			if v.version != 0 && s.big == nil {
				refs[v.version]++
			}
		}
		if vt.size() != len(refs) {
			t.Fatalf("round %d: the table holds %d versions, the set %d", round, vt.size(), len(refs))
		}
		for v, n := range refs {
			if e := vt.entries[vt.ids[v]]; e.key != v || e.refs != int32(n) {
				t.Fatalf("round %d: version %x has %d references, the set holds it %d times", round, v, e.refs, n)
			}
		}
		s.reset()
		if vt.size() != 0 || s.len() != 0 {
			t.Fatalf("round %d: after reset the table holds %d versions, the set %d names", round, vt.size(), s.len())
		}
	}
}

// countDeletedDuring is how many visited ids the iteration itself removed.
func countDeletedDuring(seen map[nameID]bool, m map[nameID]sub) int {
	n := 0
	for id := range seen {
		if _, ok := m[id]; !ok {
			n++
		}
	}
	return n
}

// Adding the most names a request may carry, in descending id order (each new id lands before
// every other), through the switch to a map; and an id the packed form cannot hold.
func TestSubSetManyAdditions(t *testing.T) {
	small := newSubSet(newVersionTable())
	small.set(1, sub{version: 1})
	small.set(nameID(subIDMask+5), sub{version: 2})
	if v, ok := small.get(nameID(subIDMask + 5)); !ok || v.version != 2 || small.len() != 2 {
		t.Fatalf("large id: %+v %v, len %d", v, ok, small.len())
	}
	if v, ok := small.get(1); !ok || v.version != 1 {
		t.Fatalf("after the switch: %+v %v", v, ok)
	}
	s := newSubSet(newVersionTable())
	for i := MaxSubscriptions - 1; i >= 0; i-- {
		s.set(nameID(i), sub{version: uint64(i) + 1})
	}
	if s.len() != MaxSubscriptions {
		t.Fatalf("len %d", s.len())
	}
	for _, i := range []int{0, 1, MaxSubscriptions / 2, MaxSubscriptions - 1} {
		if v, ok := s.get(nameID(i)); !ok || v.version != uint64(i)+1 {
			t.Fatalf("%d: %+v %v", i, v, ok)
		}
	}
}

// A burst of subscriptions, one name at a time as a request adds them, leaves the set within an
// eighth of its names (and twice subRoom) of spare room once compacted; growth by append alone
// left up to a quarter. Compacting again does not allocate: the allocator's rounding alone is
// within the bound.
func TestSubSetGivesBackRoom(t *testing.T) {
	for _, n := range []int{1, 10, 100, 700, 1000, 3000, 8000} {
		s := newSubSet(newVersionTable())
		for i := 0; i < n; i++ {
			s.set(nameID(i*7919%n+1), sub{version: uint64(i%5) + 1, explicit: true})
		}
		s.compact()
		exact := cap(slices.Grow([]subEntry(nil), n+subRoom))
		if spare := cap(s.e) - s.len(); spare > n/8+2*subRoom && cap(s.e) > exact {
			t.Errorf("%d names: capacity %d (%d spare; exact with room: %d)", n, cap(s.e), spare, exact)
		}
		if allocs := testing.AllocsPerRun(10, s.compact); allocs != 0 {
			t.Errorf("%d names: compacting a compacted set allocates %v times", n, allocs)
		}
		for i := 0; i < n; i++ {
			if _, ok := s.get(nameID(i + 1)); !ok {
				t.Fatalf("%d names: %d lost by compact", n, i+1)
			}
		}
	}
}

// holdVersions is a loop of get and set, in one hold of the version table's lock: each name
// holds its new version (forced cleared, explicit kept, a name not held added), was sees the
// version before, and the table keeps one reference per holder — in both forms of the set.
func TestSubSetHoldVersions(t *testing.T) {
	for _, big := range []bool{false, true} {
		vt := newVersionTable()
		s := newSubSet(vt)
		for i := 1; i <= 50; i++ {
			s.set(nameID(i), sub{version: uint64(i % 3), explicit: i%2 == 0, forced: i%5 == 0})
		}
		if big {
			s.toMap()
		}
		ids := []nameID{3, 10, 25, 50, 77} // 77 is not held
		olds := make([]uint64, len(ids))
		s.holdVersions(len(ids), func(i int) (nameID, uint64) { return ids[i], 100 + uint64(i) },
			func(i int, old uint64) { olds[i] = old })
		if want := []uint64{0, 1, 1, 2, 0}; !slices.Equal(olds, want) {
			t.Errorf("big %v: previous versions %v, want %v", big, olds, want)
		}
		for i, id := range ids {
			got, ok := s.get(id)
			want := sub{version: 100 + uint64(i), explicit: id != 77 && id%2 == 0}
			if !ok || got != want {
				t.Errorf("big %v: name %d holds %+v (%v), want %+v", big, id, got, ok, want)
			}
		}
		if got, _ := s.get(5); got != (sub{version: 2, forced: true}) {
			t.Errorf("big %v: a name not in the response changed: %+v", big, got)
		}
		if !big {
			// Versions 1 and 2, still held by names not in the response, and the five new
			// ones (0 is never interned).
			if n := vt.size(); n != 7 {
				t.Errorf("the version table holds %d versions, want 7 (1, 2 and the five new)", n)
			}
		}
	}
}
