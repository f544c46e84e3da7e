package sources

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

type owner struct {
	file string
	obj  Object
}

type objectState struct {
	owners  []owner // sorted by file; the last wins
	applied *Object // what the collections hold
}

// commit makes the listed files contribute what next says (a file missing from next contributes
// nothing and is forgotten), and writes the difference to the collections.
func (s *Files) commit(paths []string, next map[string]*Decoded) {
	s.mu.Lock()
	now := time.Now()
	touched := map[string]bool{}
	// vanished are the objects a file that went away defined: another file (or the same path,
	// as an editor saves it) may define them again.
	vanished := map[string]bool{}
	var gone []string
	for _, p := range paths {
		fs := s.files[p]
		d := next[p]
		var old []Object
		if fs != nil {
			old = fs.objects
		}
		oldByKey := make(map[string]Object, len(old))
		for _, o := range old {
			oldByKey[o.Key] = o
		}
		var objs []Object
		if d != nil {
			objs = d.Objects
		}
		for _, o := range objs {
			if prev, ok := oldByKey[o.Key]; ok && prev.Hash == o.Hash {
				delete(oldByKey, o.Key)
				continue
			}
			delete(oldByKey, o.Key)
			o.Obj = stamped(o.Obj, d.ModTime, now)
			s.setOwner(o.Key, p, &o)
			touched[o.Key] = true
		}
		for k := range oldByKey {
			s.setOwner(k, p, nil)
			touched[k] = true
			vanished[k] = d == nil
			if fs != nil {
				delete(fs.shadowed, k)
			}
		}
		if d == nil {
			if fs != nil {
				for k := range fs.shadowed {
					touched[k] = true
				}
			}
			delete(s.files, p)
			s.dirty[p] = true
			gone = append(gone, p)
			continue
		}
		fs = s.file(p)
		fs.objects, fs.ignored, fs.cache, fs.dups = d.Objects, d.Ignored, d.cache(), d.Duplicates
		fs.problem, fs.failHash, fs.waiting = nil, 0, false
		s.dirty[p] = true
	}
	for _, p := range gone {
		s.setLink(p, "") // a symlink that is gone no longer follows its target
	}
	var ups, dels []Object
	for k := range touched {
		st := s.objects[k]
		var win *Object
		if st != nil && len(st.owners) > 0 {
			win = &st.owners[len(st.owners)-1].obj
			for i, o := range st.owners {
				if fs := s.files[o.file]; fs != nil {
					if fs.shadowed == nil {
						fs.shadowed = map[string]string{}
					}
					if i < len(st.owners)-1 {
						fs.shadowed[k] = st.owners[len(st.owners)-1].file
					} else {
						delete(fs.shadowed, k)
					}
					s.dirty[o.file] = true
				}
			}
		}
		if win != nil {
			delete(s.orphans, k)
		}
		switch {
		case win == nil && st != nil && st.applied != nil && vanished[k] && s.o.RemoveGrace > 0:
			// Kept until the grace ends, unless a file defines it again meanwhile.
			if _, held := s.orphans[k]; !held {
				s.orphans[k] = now
			}
		case win == nil && st != nil && st.applied != nil:
			dels = append(dels, *st.applied)
			delete(s.objects, k)
			delete(s.orphans, k)
		case win == nil:
			delete(s.objects, k)
		case st.applied == nil || st.applied.Hash != win.Hash:
			w := *win
			st.applied = &w
			ups = append(ups, w)
		}
	}
	s.mu.Unlock()
	files := make([]string, len(paths))
	for i, p := range paths {
		files[i] = s.rel(p)
	}
	s.writeSorted(ups, dels, files)
	s.flushProblems()
}

// expireOrphans deletes the objects whose files went away more than the grace before now and
// that no file has defined since; it returns when the next of those left expires (zero: none).
func (s *Files) expireOrphans(now time.Time) time.Time {
	s.mu.Lock()
	var dels []Object
	var next time.Time
	for k, at := range s.orphans {
		if until := at.Add(s.o.RemoveGrace); now.Before(until) {
			if next.IsZero() || until.Before(next) {
				next = until
			}
			continue
		}
		delete(s.orphans, k)
		if st := s.objects[k]; st != nil && len(st.owners) == 0 && st.applied != nil {
			dels = append(dels, *st.applied)
			delete(s.objects, k)
		}
	}
	s.mu.Unlock()
	s.writeSorted(nil, dels, nil)
	return next
}

// writeSorted writes upserts and deletions, referenced kinds first, so that an EndpointSlice
// finds the Pods written with it (deletions in the opposite order), and logs what the files
// changed.
func (s *Files) writeSorted(ups, dels []Object, files []string) {
	slices.SortFunc(ups, func(a, b Object) int {
		if a.Kind != b.Kind {
			return int(a.Kind - b.Kind)
		}
		return strings.Compare(a.Key, b.Key)
	})
	slices.SortFunc(dels, func(a, b Object) int {
		if a.Kind != b.Kind {
			return int(b.Kind - a.Kind)
		}
		return strings.Compare(a.Key, b.Key)
	})
	s.write(ups, dels)
	if len(ups)+len(dels) > 0 {
		names := make([]string, 0, len(ups)+len(dels))
		for _, o := range ups {
			names = append(names, o.Key)
		}
		for _, o := range dels {
			names = append(names, "-"+o.Key)
		}
		s.log.Info("manifests applied", zap.Int("files", len(files)), zap.String("paths", summarize(files)), zap.Int("written", len(ups)),
			zap.Int("deleted", len(dels)), zap.String("objects", summarize(names)))
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

// setOwner records (obj non-nil) or removes that file p defines key (s.mu held).
func (s *Files) setOwner(key, p string, obj *Object) {
	st := s.objects[key]
	if st == nil {
		if obj == nil {
			return
		}
		st = &objectState{}
		s.objects[key] = st
	}
	i, found := slices.BinarySearchFunc(st.owners, p, func(o owner, f string) int { return strings.Compare(o.file, f) })
	switch {
	case obj == nil && found:
		st.owners = slices.Delete(st.owners, i, i+1)
	case obj != nil && found:
		st.owners[i].obj = *obj
	case obj != nil:
		st.owners = slices.Insert(st.owners, i, owner{file: p, obj: *obj})
	}
}

// batchMin is the number of changes of one kind from which they are written as one batch.
const batchMin = 16

// write applies the changes in order, kind by kind (upserts, then deletions): a run of at least
// batchMin changes of one kind is one batch (one event batch downstream, at the cost of the
// collection's size), a shorter one a write per object.
func (s *Files) write(ups, dels []Object) {
	for k, objs := range [][]Object{ups, dels} {
		del := k == 1
		for len(objs) > 0 {
			n := 1
			for n < len(objs) && objs[n].Kind == objs[0].Kind {
				n++
			}
			run := objs[:n]
			objs = objs[n:]
			if n < batchMin {
				for _, o := range run {
					s.static.Apply(o.Obj, del)
				}
				continue
			}
			var vals []any
			var keys []string
			for _, o := range run {
				if del {
					keys = append(keys, krt.GetKey(o.Obj))
				} else {
					vals = append(vals, o.Obj)
				}
			}
			s.static.Batch(run[0].Kind, vals, keys)
		}
	}
}

// summarize lists at most eight names, and how many more there are.
func summarize(names []string) string {
	if len(names) <= 8 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:8], ", ") + fmt.Sprintf(", and %d more", len(names)-8)
}
