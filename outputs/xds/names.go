package xds

import (
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/collections"
)

// nameID is an interned resource name: per-stream state holds these small integers, and the
// table holds each distinct subscribed name once, for as long as some stream subscribes to it.
type nameID uint32

// nameTimes are, per type, the input change behind a name's latest change once every stream
// holding the name has been marked (unix ns). The time of a change a stream has yet to send
// travels with the stream's mark instead (subscription.dirty). creator is the caller whose
// request interned the name ("" for a name of the source's).
type nameTimes struct {
	toldAt [numTypes]int64
	// changedAt is when the server learned of the name's latest change, per type (unix ns).
	changedAt [numTypes]int64
	creator   string
	// causes are the latest input changes the name's versions were computed for, oldest first
	// (at most maxNameCauses), each with when the server first learned of a version computed
	// for it: a response delivers to a client every one it was not sent before.
	causes []causeRecord
}

// causeRecord is an input change and when the server first learned of a resource computed for it
// (unix ns): a later version computed for the same change (a Pod leaving while its slice stays)
// carries it again, and is not its programming. marked is the time streams were marked with
// for it (0: recorded when a response first carried it).
type causeRecord struct {
	collections.Cause
	first, marked int64
}

// maxNameCauses bounds the changes a name remembers: a client sent a name after more changes
// than these is measured for the latest ones only.
const maxNameCauses = 8

// recorded finds a change among those the name holds: known with its record, or known and nil
// for one older than the latest (not recorded), or unknown.
func (d *nameTimes) recorded(c collections.Cause) (r *causeRecord, known bool) {
	n := len(d.causes)
	if n == 0 {
		return nil, false
	}
	if c.Seen < d.causes[n-1].Seen {
		return nil, true
	}
	for i := range d.causes {
		if d.causes[i].Cause == c {
			return &d.causes[i], true
		}
	}
	return nil, false
}

// note records the input change a name's new version was computed for, unless it is one the
// name already holds or older than its latest (a version computed again for an older change).
func (d *nameTimes) note(c collections.Cause, first, marked int64) *causeRecord {
	if r, known := d.recorded(c); known {
		return r
	}
	if n := len(d.causes); n > 0 {
		if n == maxNameCauses {
			d.causes = append(d.causes[:0], d.causes[1:]...)
		}
	}
	d.causes = append(d.causes, causeRecord{Cause: c, first: first, marked: marked})
	return &d.causes[len(d.causes)-1]
}

// nameTable interns the names streams subscribe to. It bounds what one caller (an identity, or
// a connection on the plaintext port) can make it hold: the bytes of the names the caller's
// requests interned first, while some stream holds them (a name another stream subscribed to
// before costs nothing more). Its lock is a leaf: taken inside the index's, never around another.
type nameTable struct {
	refTable[string, nameID, nameTimes]
	callerMax   int64
	callerBytes map[string]int64
}

func newNameTable(callerMax int64) *nameTable {
	return &nameTable{refTable: newRefTable[string, nameID, nameTimes](0), callerMax: callerMax, callerBytes: map[string]int64{}}
}

// acquireFor interns names a caller's request subscribes to and takes a reference to each,
// under one lock; names new to the table are the caller's, and past its bound none is taken.
func (t *nameTable) acquireFor(caller string, names []string) ([]nameID, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]nameID, len(names))
	var fresh int64
	for i, n := range names {
		_, known := t.ids[n]
		out[i] = t.acquireLocked(n)
		if !known {
			t.entries[out[i]].data.creator = caller
			fresh += int64(len(n))
		}
	}
	if held := t.callerBytes[caller]; t.callerMax > 0 && held+fresh > t.callerMax {
		for _, id := range out {
			t.releaseLocked(id)
		}
		return nil, status.Errorf(codes.ResourceExhausted, "the names %s's streams subscribed to first hold %d bytes; %d more would pass the bound of %d",
			clip(caller), held, fresh, t.callerMax)
	}
	if fresh > 0 {
		t.callerBytes[caller] += fresh
	}
	return out, nil
}

// release drops a reference; the name is forgotten with its last one, and its bytes no longer
// count for its creator.
func (t *nameTable) release(id nameID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if gone, last := t.releaseLocked(id); last && gone.data.creator != "" {
		if t.callerBytes[gone.data.creator] -= int64(len(gone.key)); t.callerBytes[gone.data.creator] <= 0 {
			delete(t.callerBytes, gone.data.creator)
		}
	}
}

func (t *nameTable) name(id nameID) string { return t.key(id) }

// setTold records the change time of names (ids[i] looked up for names[i]), for each id that
// still stands for its name: the stream holding it may have let it go since, and its id then
// stands for another name. One hold of the lock for them all: the change handler that calls it
// must not queue behind the streams' subscriptions (a herd's, ten thousand names each) once per
// name.
func (t *nameTable) setTold(ids []nameID, names []string, ty typ, at int64) {
	t.mu.Lock()
	for i, id := range ids {
		if e := &t.entries[id]; e.refs > 0 && e.key == names[i] {
			e.data.toldAt[ty] = at
		}
	}
	t.mu.Unlock()
}

// setChanged records when the server learned of a name's change (unix ns), and the input change
// its new version was computed for (causeOf, by name; zero if unknown) with the time streams were
// marked with (at), if id still stands for it.
func (t *nameTable) setChanged(ids []nameID, names []string, ty typ, now, at int64, causeOf func(string) collections.Cause) {
	t.mu.Lock()
	for i, id := range ids {
		if e := &t.entries[id]; e.refs > 0 && e.key == names[i] {
			e.data.changedAt[ty] = now
			if causeOf == nil {
				continue
			}
			if c := causeOf(names[i]); !c.IsZero() {
				e.data.note(c, now, at)
			}
		}
	}
	t.mu.Unlock()
}

// delivered calls f, for each item of a response, with each input change the response is the
// first to deliver to its client, and when the server first learned of a version computed for
// it: the changes of the item's name marked since the earliest change the client had not been
// sent (item.at; none for an item that carries no change), and the change of the version sent.
// A version computed for a change older than the name's latest (its latest input went away, a
// Pod or a slice) is not that change's programming. A change is first computed once, whoever is
// sent it first.
func (t *nameTable) delivered(ty typ, items []item, f func(i int, c collections.Cause, first int64)) {
	// Under the read lock, as every stream's every response passes here: only a change no
	// response carried before is recorded, under the write lock after.
	var unrecorded []int
	t.mu.RLock()
	for i, it := range items {
		d := &t.entries[it.id].data
		c := it.res.Cause
		if it.at > 0 {
			for _, r := range d.causes {
				if r.marked >= it.at && r.Cause != c {
					f(i, r.Cause, r.first)
				}
			}
		}
		if c.IsZero() {
			continue
		}
		if r, known := d.recorded(c); known {
			if r != nil {
				f(i, c, r.first)
			}
			continue
		}
		unrecorded = append(unrecorded, i)
	}
	t.mu.RUnlock()
	if len(unrecorded) == 0 {
		return
	}
	now := time.Now().UnixNano()
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, i := range unrecorded {
		d := &t.entries[items[i].id].data
		c := items[i].res.Cause
		first := d.changedAt[ty]
		if first == 0 {
			// A name the server was told no change of since it was interned: computed before
			// then, after the change was seen.
			first = c.Seen
		}
		if first == 0 {
			first = now
		}
		if r := d.note(c, first, 0); r != nil {
			f(i, c, r.first)
		}
	}
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
