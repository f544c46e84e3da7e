package xds

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// connSet behaves as a set of slots through random additions and removals, over dense and
// sparse slots, switching from a list to a bitmap on the way.
func TestConnSetIsASet(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for round := 0; round < 200; round++ {
		var s connSet
		m := map[uint32]bool{}
		span := uint32(1 + r.IntN(2000))
		if round%4 == 0 {
			span = 1 << 20 // sparse: slots far apart
		}
		for op := 0; op < 500; op++ {
			i := uint32(r.IntN(int(span)))
			if r.IntN(3) > 0 {
				s.add(i)
				m[i] = true
			} else {
				empty := s.remove(i)
				delete(m, i)
				if empty != (len(m) == 0) {
					t.Fatalf("round %d: remove says empty=%v with %d left", round, empty, len(m))
				}
			}
			if s.has(i) != m[i] {
				t.Fatalf("round %d: has(%d) = %v", round, i, s.has(i))
			}
		}
		var got, want []uint32
		s.each(func(i uint32) { got = append(got, i) })
		for i := range m {
			want = append(want, i)
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: each gave %v, want %v", round, got, want)
		}
		for i := range m {
			s.remove(i)
		}
		if s != nil {
			t.Fatalf("round %d: an emptied set keeps %d words", round, len(s))
		}
	}
}

// A name held only by streams of high slots costs words for those streams, not for every slot
// below them; a name held by many streams is a bitmap no longer than its highest slot needs.
func TestConnSetCostIsBounded(t *testing.T) {
	var sparse connSet
	sparse.add(100000)
	sparse.add(250000)
	if len(sparse) > 2 {
		t.Fatalf("two high slots take %d words", len(sparse))
	}
	var dense connSet
	for i := uint32(0); i < 1000; i++ {
		dense.add(i)
	}
	if len(dense) > bitmapWords(999) {
		t.Fatalf("1 000 slots take %d words, a bitmap %d", len(dense), bitmapWords(999))
	}
	for i := uint32(0); i < 1000; i += 2 {
		dense.remove(i)
	}
	if len(dense) > bitmapWords(999) || !dense.has(999) || dense.has(998) {
		t.Fatalf("after removals: %d words, has(999)=%v has(998)=%v", len(dense), dense.has(999), dense.has(998))
	}
}
