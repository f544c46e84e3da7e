package xds

import "math/bits"

// connSet is a set of streams by slot (Server.slots), the streams holding one name. A name held
// by many streams is a bitmap, one bit per slot up to the highest (a list of pointers cost 8
// bytes and spare capacity per stream and name). A name held by few streams of high slots is a
// sorted list of slots instead, so that a stream's subscriptions cost at most 4 bytes each
// whatever its slot: a bitmap alone would make a client of slot 100 000 pay 12 KB for each name
// only it holds.
//
// Word 0 is the header: listFlag and the number of slots of a list, 0 for a bitmap. A list packs
// two slots a word from word 1; a bitmap's words follow the header.
type connSet []uint64

const listFlag = 1 << 63

func (b connSet) isList() bool { return len(b) > 0 && b[0]&listFlag != 0 }
func (b connSet) listLen() int { return int(uint32(b[0])) }

func (b connSet) listAt(i int) uint32 { return uint32(b[1+i/2] >> (32 * (i % 2))) }

func (b connSet) setListAt(i int, slot uint32) {
	w := &b[1+i/2]
	shift := 32 * (i % 2)
	*w = *w&^(0xffffffff<<shift) | uint64(slot)<<shift
}

// listWords is the length of a list of n slots; bitmapWords of a bitmap up to slot max.
func listWords(n int) int        { return 1 + (n+1)/2 }
func bitmapWords(max uint32) int { return 2 + int(max/64) }

// listMax is the highest slot of a (non-empty) list.
func (b connSet) listMax() uint32 { return b.listAt(b.listLen() - 1) }

// search is the position of slot in the list, and whether it is there.
func (b connSet) search(slot uint32) (int, bool) {
	lo, hi := 0, b.listLen()
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if b.listAt(m) < slot {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < b.listLen() && b.listAt(lo) == slot
}

// add puts slot i in the set.
func (b *connSet) add(i uint32) {
	switch {
	case len(*b) == 0:
		*b = connSet{listFlag | 1, uint64(i)}
	case b.isList():
		at, ok := b.search(i)
		if ok {
			return
		}
		n := b.listLen()
		if listWords(n+1) > bitmapWords(max(i, b.listMax())) {
			b.toBitmap()
			b.setBit(i)
			return
		}
		if listWords(n+1) > len(*b) {
			*b = append(*b, 0)
		}
		for j := n; j > at; j-- {
			b.setListAt(j, b.listAt(j-1))
		}
		b.setListAt(at, i)
		(*b)[0] = listFlag | uint64(n+1)
	default:
		b.setBit(i)
	}
}

func (b *connSet) setBit(i uint32) {
	w := 1 + int(i/64)
	if w >= len(*b) {
		grown := make(connSet, w+1)
		copy(grown, *b)
		*b = grown
	}
	(*b)[w] |= 1 << (i % 64)
}

// toBitmap turns a list into a bitmap.
func (b *connSet) toBitmap() {
	m := make(connSet, bitmapWords(b.listMax()))
	for j := 0; j < b.listLen(); j++ {
		s := b.listAt(j)
		m[1+s/64] |= 1 << (s % 64)
	}
	*b = m
}

// remove takes slot i out of the set and reports whether the set is then empty; an empty set
// releases its words.
func (b *connSet) remove(i uint32) (empty bool) {
	if len(*b) == 0 {
		return true
	}
	if b.isList() {
		at, ok := b.search(i)
		if ok {
			n := b.listLen()
			for j := at; j < n-1; j++ {
				b.setListAt(j, b.listAt(j+1))
			}
			if n == 1 {
				*b = nil
				return true
			}
			b.setListAt(n-1, 0)
			(*b)[0] = listFlag | uint64(n-1)
			*b = (*b)[:listWords(n-1)]
		}
		return false
	}
	if w := 1 + int(i/64); w < len(*b) {
		(*b)[w] &^= 1 << (i % 64)
	}
	// Trailing zero words are dropped, so that the set is no longer than its highest slot needs.
	n := len(*b)
	for n > 1 && (*b)[n-1] == 0 {
		n--
	}
	if n == 1 {
		*b = nil
		return true
	}
	*b = (*b)[:n]
	return false
}

// has reports whether slot i is in the set.
func (b connSet) has(i uint32) bool {
	if len(b) == 0 {
		return false
	}
	if b.isList() {
		_, ok := b.search(i)
		return ok
	}
	w := 1 + int(i/64)
	return w < len(b) && b[w]&(1<<(i%64)) != 0
}

// each calls f with every slot of the set, in increasing order.
func (b connSet) each(f func(i uint32)) {
	if b.isList() {
		for j := 0; j < b.listLen(); j++ {
			f(b.listAt(j))
		}
		return
	}
	for w := 1; w < len(b); w++ {
		for word := b[w]; word != 0; word &= word - 1 {
			f(uint32((w-1)*64 + bits.TrailingZeros64(word)))
		}
	}
}
