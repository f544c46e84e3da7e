package xds

import "sync"

// refTable interns keys with reference counts: per-stream state holds small integer ids, and
// the table holds each distinct key once (with per-key data E), for as long as some reference to
// it is held. Ids below reserved are never handed out.
type refTable[K comparable, I ~uint32, E any] struct {
	mu      sync.RWMutex
	ids     map[K]I
	entries []refEntry[K, E]
	free    []I
}

type refEntry[K comparable, E any] struct {
	key  K
	refs int32
	data E
}

func newRefTable[K comparable, I ~uint32, E any](reserved int) refTable[K, I, E] {
	return refTable[K, I, E]{ids: map[K]I{}, entries: make([]refEntry[K, E], reserved)}
}

// acquire interns k and takes a reference to it.
func (t *refTable[K, I, E]) acquire(k K) I {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acquireLocked(k)
}

// acquireAll interns keys and takes a reference to each, under one lock.
func (t *refTable[K, I, E]) acquireAll(keys []K) []I {
	out := make([]I, len(keys))
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, k := range keys {
		out[i] = t.acquireLocked(k)
	}
	return out
}

func (t *refTable[K, I, E]) acquireLocked(k K) I {
	if id, ok := t.ids[k]; ok {
		t.entries[id].refs++
		return id
	}
	var id I
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
		t.entries[id] = refEntry[K, E]{key: k, refs: 1}
	} else {
		id = I(len(t.entries))
		t.entries = append(t.entries, refEntry[K, E]{key: k, refs: 1})
	}
	t.ids[k] = id
	return id
}

// release drops a reference; the key is forgotten with its last one.
func (t *refTable[K, I, E]) release(id I) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := &t.entries[id]
	if e.refs--; e.refs > 0 {
		return
	}
	delete(t.ids, e.key)
	*e = refEntry[K, E]{}
	t.free = append(t.free, id)
}

// lookup finds an interned key without taking a reference.
func (t *refTable[K, I, E]) lookup(k K) (I, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	id, ok := t.ids[k]
	return id, ok
}

// key is the key an id stands for.
func (t *refTable[K, I, E]) key(id I) K {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.entries[id].key
}

// size is the number of distinct keys held.
func (t *refTable[K, I, E]) size() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.ids)
}
