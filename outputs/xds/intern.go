package xds

import "sync"

// The interning tables of the server: resource names and versions held by streams' subscriptions
// are small integers here, each distinct one held once, for as long as some stream holds it.

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
	t.releaseLocked(id)
}

// releaseLocked drops a reference (t.mu held), returning the entry when it was the last.
func (t *refTable[K, I, E]) releaseLocked(id I) (gone refEntry[K, E], last bool) {
	e := &t.entries[id]
	if e.refs--; e.refs > 0 {
		return gone, false
	}
	gone = *e
	delete(t.ids, e.key)
	*e = refEntry[K, E]{}
	t.free = append(t.free, id)
	return gone, true
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

// versionID is an interned resource version: a stream's subscription holds the version its
// client has as one of these (4 bytes) instead of the 8-byte version, and the table holds each
// distinct version once, for as long as some stream's client holds it. 0 stands for version 0
// (the client holds nothing) and is never counted.
type versionID uint32

// versionTable interns versions with reference counts. A mesh's streams hold few distinct
// versions (one per resource and proxy class, and briefly the previous one), so the table stays
// small however many streams hold them.
type versionTable struct {
	refTable[uint64, versionID, struct{}]
}

func newVersionTable() *versionTable {
	return &versionTable{newRefTable[uint64, versionID, struct{}](1)}
}

// acquire interns v and takes a reference to it (version 0 is never interned: no lock).
func (t *versionTable) acquire(v uint64) versionID {
	if v == 0 {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acquireLocked(v)
}

// release drops a reference.
func (t *versionTable) release(id versionID) {
	if id != 0 {
		t.mu.Lock()
		defer t.mu.Unlock()
		t.releaseLocked(id)
	}
}

// acquireLocked is acquire with t.mu held.
func (t *versionTable) acquireLocked(v uint64) versionID {
	if v == 0 {
		return 0
	}
	return t.refTable.acquireLocked(v)
}

// releaseLocked is release with t.mu held.
func (t *versionTable) releaseLocked(id versionID) {
	if id != 0 {
		t.refTable.releaseLocked(id)
	}
}

// versionLocked is version with t.mu held.
func (t *versionTable) versionLocked(id versionID) uint64 {
	if id == 0 {
		return 0
	}
	return t.entries[id].key
}

// version is the version an id stands for.
func (t *versionTable) version(id versionID) uint64 {
	if id == 0 {
		return 0
	}
	return t.key(id)
}
