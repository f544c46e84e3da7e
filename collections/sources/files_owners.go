package sources

import (
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/krteds/krteds/collections"
)

// owners is the part of a manifests source that knows which file defines which object: it turns
// a file's new content (or its removal) into the writes and deletes to apply to the collections.
// When two files define the same object, the file whose path sorts last wins; the objects of a
// file that went away are kept for the grace, in case a file defines them again. It is not safe
// for concurrent use: Files' lock guards it.
type owners struct {
	files   map[string]*fileState
	objects map[string]*objectState
	// orphans are the objects whose files went away, kept applied for grace from when.
	orphans map[string]time.Time
	// grace is how long orphans are kept (RemoveGrace; negative or zero: not at all).
	grace time.Duration
}

type fileState struct {
	hash    uint64 // the applied content; 0 before any
	objects []Object
	ignored map[string]int
	cache   decodeCache
	// problem says why the file's current content is not applied; failHash is that content.
	problem  *collections.Problem
	failHash uint64
	// waiting: another process holds the file open for writing; it is read when closed.
	waiting bool
	// shadowed maps objects of this file that another file also defines, and wins, to that file.
	shadowed map[string]string
	// dups are objects defined twice in this file.
	dups []string
}

type owner struct {
	file string
	obj  Object
}

type objectState struct {
	owners  []owner // sorted by file; the last wins
	applied *Object // what the collections hold
}

// fileContent is a file's new content: what it decoded to, and its hash.
type fileContent struct {
	decoded *Decoded
	hash    uint64
}

// written is what a commit changed: the objects to write and to delete, the files whose
// problems may have changed, and the files that are gone.
type written struct {
	ups, dels []Object
	changed   []string
	gone      []string
}

func newOwners(grace time.Duration) *owners {
	return &owners{files: map[string]*fileState{}, objects: map[string]*objectState{}, orphans: map[string]time.Time{}, grace: grace}
}

// file returns the state of a file, creating it.
func (o *owners) file(p string) *fileState {
	fs := o.files[p]
	if fs == nil {
		fs = &fileState{}
		o.files[p] = fs
	}
	return fs
}

// held is what the owners hold of a file, for the reader.
func (o *owners) held(p string) held {
	fs := o.files[p]
	if fs == nil {
		return held{}
	}
	h := held{known: true, hash: fs.hash, cache: fs.cache}
	if fs.problem != nil {
		h.hash = fs.failHash
	}
	return h
}

func (o *owners) has(p string) bool { return o.files[p] != nil }

func (o *owners) under(p string) []string {
	var out []string
	for f := range o.files {
		if within(f, p) {
			out = append(out, f)
		}
	}
	return out
}

func (o *owners) in(dir string) []string {
	var out []string
	for f := range o.files {
		if filepath.Dir(f) == dir {
			out = append(out, f)
		}
	}
	return out
}

// paths lists the files held, sorted.
func (o *owners) paths() []string { return collections.SortedKeys(o.files) }

// setProblem records why a file's current content (hash; 0: unread) is not applied; it keeps
// its objects.
func (o *owners) setProblem(p string, prob *collections.Problem, hash uint64) {
	fs := o.file(p)
	fs.problem, fs.failHash, fs.waiting = prob, hash, false
}

// setWaiting notes that another process is writing the file.
func (o *owners) setWaiting(p string) { o.file(p).waiting = true }

// unchanged notes that a file read again holds what was applied: a problem reading it, or a
// writer, is gone. It reports whether that changed the file's state.
func (o *owners) unchanged(p string, hash uint64) bool {
	fs := o.files[p]
	if fs == nil || !(fs.waiting || (fs.problem != nil && fs.failHash != hash)) {
		return false
	}
	fs.waiting, fs.problem, fs.failHash = false, nil, 0
	return true
}

// commit makes the listed files contribute what next says (a file missing from next contributes
// nothing and is forgotten), and returns the difference to write to the collections. now stamps
// the objects written and starts the grace of those orphaned.
func (o *owners) commit(paths []string, next map[string]fileContent, now time.Time) written {
	var out written
	touched := map[string]bool{}
	// vanished are the objects a file that went away defined: another file (or the same path,
	// as an editor saves it) may define them again.
	vanished := map[string]bool{}
	for _, p := range paths {
		fs := o.files[p]
		c, ok := next[p]
		var old []Object
		if fs != nil {
			old = fs.objects
		}
		oldByKey := make(map[string]Object, len(old))
		for _, ob := range old {
			oldByKey[ob.Key] = ob
		}
		var objs []Object
		if ok {
			objs = c.decoded.Objects
		}
		for _, ob := range objs {
			if prev, ok := oldByKey[ob.Key]; ok && prev.Hash == ob.Hash {
				delete(oldByKey, ob.Key)
				continue
			}
			delete(oldByKey, ob.Key)
			ob.Obj = stamped(ob.Obj, c.decoded.ModTime, now)
			o.setOwner(ob.Key, p, &ob)
			touched[ob.Key] = true
		}
		for k := range oldByKey {
			o.setOwner(k, p, nil)
			touched[k] = true
			vanished[k] = !ok
			if fs != nil {
				delete(fs.shadowed, k)
			}
		}
		out.changed = append(out.changed, p)
		if !ok {
			if fs != nil {
				for k := range fs.shadowed {
					touched[k] = true
				}
			}
			delete(o.files, p)
			out.gone = append(out.gone, p)
			continue
		}
		fs = o.file(p)
		d := c.decoded
		fs.hash, fs.objects, fs.ignored, fs.cache, fs.dups = c.hash, d.Objects, d.Ignored, d.cache(), d.Duplicates
		fs.problem, fs.failHash, fs.waiting = nil, 0, false
	}
	for k := range touched {
		st := o.objects[k]
		var win *Object
		if st != nil && len(st.owners) > 0 {
			last := len(st.owners) - 1
			win = &st.owners[last].obj
			for i, ow := range st.owners {
				if fs := o.files[ow.file]; fs != nil {
					if fs.shadowed == nil {
						fs.shadowed = map[string]string{}
					}
					if i < last {
						fs.shadowed[k] = st.owners[last].file
					} else {
						delete(fs.shadowed, k)
					}
					out.changed = append(out.changed, ow.file)
				}
			}
		}
		if win != nil {
			delete(o.orphans, k)
		}
		switch {
		case win == nil && st != nil && st.applied != nil && vanished[k] && o.grace > 0:
			// Kept until the grace ends, unless a file defines it again meanwhile.
			if _, kept := o.orphans[k]; !kept {
				o.orphans[k] = now
			}
		case win == nil && st != nil && st.applied != nil:
			out.dels = append(out.dels, *st.applied)
			delete(o.objects, k)
			delete(o.orphans, k)
		case win == nil:
			delete(o.objects, k)
		case st.applied == nil || st.applied.Hash != win.Hash:
			w := *win
			st.applied = &w
			out.ups = append(out.ups, w)
		}
	}
	return out
}

// expire returns the objects to delete whose files went away more than the grace before now and
// that no file has defined since, and when the next of those left expires (zero: none).
func (o *owners) expire(now time.Time) (dels []Object, next time.Time) {
	for k, at := range o.orphans {
		if until := at.Add(o.grace); now.Before(until) {
			if next.IsZero() || until.Before(next) {
				next = until
			}
			continue
		}
		delete(o.orphans, k)
		if st := o.objects[k]; st != nil && len(st.owners) == 0 && st.applied != nil {
			dels = append(dels, *st.applied)
			delete(o.objects, k)
		}
	}
	return dels, next
}

// setOwner records (obj non-nil) or removes that file p defines key.
func (o *owners) setOwner(key, p string, obj *Object) {
	st := o.objects[key]
	if st == nil {
		if obj == nil {
			return
		}
		st = &objectState{}
		o.objects[key] = st
	}
	i, found := slices.BinarySearchFunc(st.owners, p, func(ow owner, f string) int { return strings.Compare(ow.file, f) })
	switch {
	case obj == nil && found:
		st.owners = slices.Delete(st.owners, i, i+1)
	case obj != nil && found:
		st.owners[i].obj = *obj
	case obj != nil:
		st.owners = slices.Insert(st.owners, i, owner{file: p, obj: *obj})
	}
}

// stamped is an object as written now: a slice says when its file changed (its trigger, unless
// it carries its own), a Pod without a Ready transition time that its file's change made it
// ready or not, and both when krteds took them; a copy, as the decoder may keep the object.
func stamped(obj any, modTime int64, now time.Time) any {
	switch o := obj.(type) {
	case *collections.Slice:
		cp := *o
		if cp.Trigger == 0 {
			cp.Trigger = modTime
		}
		cp.Seen = now.UnixNano()
		return &cp
	case *collections.Pod:
		cp := *o
		if cp.ReadySince == 0 {
			cp.ReadySince = modTime
		}
		cp.Seen = now.UnixNano()
		return &cp
	}
	return obj
}
