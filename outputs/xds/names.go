package xds

// nameID is an interned resource name: per-stream state holds these small integers, and the
// table holds each distinct subscribed name once, for as long as some stream subscribes to it.
type nameID uint32

// nameTimes are, per type, the input change behind a name's latest change once every stream
// holding the name has been marked (unix ns). The time of a change a stream has yet to send
// travels with the stream's mark instead (typeState.dirty).
type nameTimes struct {
	toldAt [numTypes]int64
}

type nameTable struct {
	refTable[string, nameID, nameTimes]
}

func newNameTable() *nameTable {
	return &nameTable{newRefTable[string, nameID, nameTimes](0)}
}

func (t *nameTable) name(id nameID) string { return t.key(id) }

// setTold records the change time of a name, if id still stands for it: the stream holding it
// may have let it go since it was looked up, and its id then stands for another name.
func (t *nameTable) setTold(id nameID, name string, ty typ, at int64) {
	t.mu.Lock()
	if e := &t.entries[id]; e.refs > 0 && e.key == name {
		e.data.toldAt[ty] = at
	}
	t.mu.Unlock()
}

func (t *nameTable) told(id nameID, ty typ) int64 {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.entries[id].data.toldAt[ty]
}

// reading calls f with a lookup of the table's copies of names (no string is made to look one
// up), under one read lock: f must not use the table otherwise.
func (t *nameTable) reading(f func(lookup func(b []byte) (string, bool)) error) error {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return f(func(b []byte) (string, bool) {
		if id, ok := t.ids[string(b)]; ok {
			return t.entries[id].key, true
		}
		return "", false
	})
}
