package xds

import "math/bits"

// connSet is a set of streams by slot (Server.slots): bit i stands for the stream in slot i. The
// server indexes, per name, the streams holding it; as a bitmap that costs one bit per stream
// slot and name, where a list of pointers cost 8 bytes and its spare capacity per stream and name.
type connSet []uint64

// add puts slot i in the set.
func (b *connSet) add(i uint32) {
	w := int(i / 64)
	if w >= len(*b) {
		grown := make(connSet, w+1)
		copy(grown, *b)
		*b = grown
	}
	(*b)[w] |= 1 << (i % 64)
}

// remove takes slot i out of the set and reports whether the set is then empty; an empty set
// releases its words.
func (b *connSet) remove(i uint32) (empty bool) {
	if w := int(i / 64); w < len(*b) {
		(*b)[w] &^= 1 << (i % 64)
	}
	// Trailing zero words are dropped, so that the set is no longer than its highest slot needs.
	n := len(*b)
	for n > 0 && (*b)[n-1] == 0 {
		n--
	}
	if n == 0 {
		*b = nil
		return true
	}
	*b = (*b)[:n]
	return false
}

// has reports whether slot i is in the set.
func (b connSet) has(i uint32) bool {
	w := int(i / 64)
	return w < len(b) && b[w]&(1<<(i%64)) != 0
}

// each calls f with every slot of the set, in increasing order.
func (b connSet) each(f func(i uint32)) {
	for w, word := range b {
		for word != 0 {
			bit := bits.TrailingZeros64(word)
			f(uint32(w*64 + bit))
			word &= word - 1
		}
	}
}
