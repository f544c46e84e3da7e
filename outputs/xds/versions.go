package xds

import "sync"

// versionID is an interned resource version: a stream's subscription holds the version its
// client has as one of these (4 bytes) instead of the 8-byte version, and the table holds each
// distinct version once, for as long as some stream's client holds it. 0 stands for version 0
// (the client holds nothing).
type versionID uint32

type versionEntry struct {
	version uint64
	refs    uint32
}

// versionTable interns versions with reference counts. A mesh's streams hold few distinct
// versions (one per resource and proxy class, and briefly the previous one), so the table stays
// small however many streams hold them.
type versionTable struct {
	mu      sync.RWMutex
	ids     map[uint64]versionID
	entries []versionEntry
	free    []versionID
}

func newVersionTable() *versionTable {
	// Entry 0 is version 0 and is never counted.
	return &versionTable{ids: map[uint64]versionID{}, entries: make([]versionEntry, 1)}
}

// acquire interns v and takes a reference to it.
func (t *versionTable) acquire(v uint64) versionID {
	if v == 0 {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.ids[v]; ok {
		t.entries[id].refs++
		return id
	}
	var id versionID
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
		t.entries[id] = versionEntry{version: v, refs: 1}
	} else {
		id = versionID(len(t.entries))
		t.entries = append(t.entries, versionEntry{version: v, refs: 1})
	}
	t.ids[v] = id
	return id
}

// release drops a reference; the version is forgotten with its last one.
func (t *versionTable) release(id versionID) {
	if id == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := &t.entries[id]
	if e.refs--; e.refs > 0 {
		return
	}
	delete(t.ids, e.version)
	*e = versionEntry{}
	t.free = append(t.free, id)
}

// version is the version an id stands for.
func (t *versionTable) version(id versionID) uint64 {
	if id == 0 {
		return 0
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.entries[id].version
}

// size is the number of distinct versions held.
func (t *versionTable) size() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.ids)
}
