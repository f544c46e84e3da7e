package xds

import "sync"

// nameID is an interned resource name: per-stream state holds these small integers, and the
// table holds each distinct subscribed name once, for as long as some stream subscribes to it.
type nameID uint32

type nameEntry struct {
	name string
	refs int32
	// changedAt is, per type, the input change behind the resource's latest version (unix ns);
	// toldAt the same once every stream holding the name has been marked.
	changedAt [numTypes]int64
	toldAt    [numTypes]int64
}

type nameTable struct {
	mu      sync.RWMutex
	ids     map[string]nameID
	entries []nameEntry
	free    []nameID
}

func newNameTable() *nameTable { return &nameTable{ids: map[string]nameID{}} }

// acquire interns name and takes a reference to it.
func (t *nameTable) acquire(name string) nameID {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id, ok := t.ids[name]; ok {
		t.entries[id].refs++
		return id
	}
	var id nameID
	if n := len(t.free); n > 0 {
		id = t.free[n-1]
		t.free = t.free[:n-1]
		t.entries[id] = nameEntry{name: name, refs: 1}
	} else {
		id = nameID(len(t.entries))
		t.entries = append(t.entries, nameEntry{name: name, refs: 1})
	}
	t.ids[name] = id
	return id
}

// release drops a reference; the name is forgotten with its last one.
func (t *nameTable) release(id nameID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := &t.entries[id]
	if e.refs--; e.refs > 0 {
		return
	}
	delete(t.ids, e.name)
	*e = nameEntry{}
	t.free = append(t.free, id)
}

// lookup finds an interned name without taking a reference.
func (t *nameTable) lookup(name string) (nameID, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	id, ok := t.ids[name]
	return id, ok
}

func (t *nameTable) name(id nameID) string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.entries[id].name
}

func (t *nameTable) setChanged(id nameID, ty typ, at int64) {
	t.mu.Lock()
	t.entries[id].changedAt[ty] = at
	t.mu.Unlock()
}

func (t *nameTable) changed(id nameID, ty typ) int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.entries[id].changedAt[ty]
}

// size is the number of distinct names held.
func (t *nameTable) size() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.ids)
}

func (t *nameTable) setTold(id nameID, ty typ, at int64) {
	t.mu.Lock()
	t.entries[id].toldAt[ty] = at
	t.mu.Unlock()
}

func (t *nameTable) told(id nameID, ty typ) int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.entries[id].toldAt[ty]
}
