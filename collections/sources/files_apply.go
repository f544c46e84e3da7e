package sources

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// load reads and decodes the files to read (in parallel, without the lock: the reader is told
// what the owners hold of each), then commits them with the files that are gone, as one change.
func (s *Files) load(c *changes) {
	paths := slices.Compact(slices.Sorted(slices.Values(c.read)))
	was := make([]held, len(paths))
	s.mu.Lock()
	for i, p := range paths {
		was[i] = s.owners.held(p)
	}
	scope := s.tree.scope()
	s.mu.Unlock()
	results := make([]readResult, len(paths))
	// A file found open for writing is checked again until settle, once for the whole batch: a
	// batch of many files held open costs 10 ms, not 10 ms a file.
	settle := time.Now().Add(settleTime)
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i, p := range paths {
		g.Go(func() error { results[i] = s.reader.load(p, was[i], scope, settle, c.asIs); return nil })
	}
	_ = g.Wait()

	var commitPaths []string
	next := map[string]fileContent{}
	for _, p := range paths {
		delete(c.gone, p) // there after all: what reading it found decides
	}
	for p := range c.gone {
		commitPaths = append(commitPaths, p) // absent from next: gone
	}
	s.mu.Lock()
	for _, r := range results {
		if r.found {
			s.tree.setLink(r.path, r.link)
		}
		switch {
		case r.waiting:
			s.owners.setWaiting(r.path)
		case r.problem != nil:
			s.owners.setProblem(r.path, r.problem, r.hash)
			s.probs.mark(r.path)
		case r.decoded != nil:
			commitPaths = append(commitPaths, r.path)
			next[r.path] = fileContent{decoded: r.decoded, hash: r.hash}
		default:
			// Unchanged content: only a problem with reading it (or a writer) may have gone.
			if s.owners.unchanged(r.path, r.hash) {
				s.probs.mark(r.path)
			}
		}
	}
	ups := s.probs.pending(s.describe)
	s.mu.Unlock()
	s.probs.write(ups)
	slices.Sort(commitPaths)
	s.commit(commitPaths, next)
}

// commit has the owners take the files' new contents and writes the difference to the
// collections, then the problems that changed.
func (s *Files) commit(paths []string, next map[string]fileContent) {
	s.mu.Lock()
	w := s.owners.commit(paths, next, time.Now())
	s.probs.mark(w.changed...)
	for _, p := range w.gone {
		s.tree.setLink(p, "") // a symlink that is gone no longer follows its target
	}
	files := make([]string, len(paths))
	for i, p := range paths {
		files[i] = s.tree.rel(p)
	}
	s.mu.Unlock()
	s.writeSorted(w.ups, w.dels, files)
	s.flushProblems()
}

// expireOrphans deletes the objects whose files went away more than the grace before now and
// that no file has defined since; it returns when the next of those left expires (zero: none).
func (s *Files) expireOrphans(now time.Time) time.Time {
	s.mu.Lock()
	dels, next := s.owners.expire(now)
	s.mu.Unlock()
	s.writeSorted(nil, dels, nil)
	return next
}

// describe is the name of a file's problems and the problems themselves (s.mu held).
func (s *Files) describe(p string) (string, *collections.ObjectProblems) {
	name := s.tree.rel(p)
	return name, fileProblems(name, s.owners.files[p], s.tree.rel)
}

// flushProblems writes the problems of the files marked to the Problems collection.
func (s *Files) flushProblems() {
	s.mu.Lock()
	ups := s.probs.pending(s.describe)
	s.mu.Unlock()
	s.probs.write(ups)
}

// reconcileProblems makes the Problems collection hold exactly the problems of the files known.
func (s *Files) reconcileProblems() {
	s.mu.Lock()
	want := map[string]collections.ObjectProblems{}
	for _, p := range s.owners.paths() {
		if _, op := s.describe(p); op != nil {
			want[op.ResourceName()] = *op
		}
	}
	if op := linkProblems(s.tree.name(), s.tree.linkProblem); op != nil {
		want[op.ResourceName()] = *op
	}
	s.mu.Unlock()
	s.probs.replace(want)
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

// FileStatus is one manifest file as /debug/sources shows it.
type FileStatus struct {
	Path    string         `json:"path"`
	Objects int            `json:"objects"`
	Ignored map[string]int `json:"ignored,omitempty"`
	// Applied is false when the file's current content is not applied (see Problems).
	Applied  bool                  `json:"applied"`
	Waiting  bool                  `json:"beingWritten,omitempty"`
	Problems []collections.Problem `json:"problems,omitempty"`
}

// Status lists every file the source knows, by path (and the link, when it leads nowhere).
func (s *Files) Status() []FileStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	paths := s.owners.paths()
	out := make([]FileStatus, 0, len(paths)+1)
	if op := linkProblems(s.tree.name(), s.tree.linkProblem); op != nil {
		out = append(out, FileStatus{Path: op.Object, Problems: op.Problems})
	}
	for _, p := range paths {
		fs := s.owners.files[p]
		name, op := s.describe(p)
		st := FileStatus{Path: name, Objects: len(fs.objects), Ignored: fs.ignored, Applied: fs.problem == nil && !fs.waiting, Waiting: fs.waiting}
		if op != nil {
			st.Problems = op.Problems
		}
		out = append(out, st)
	}
	return out
}

// Skipped lists the files whose current content is not applied, with the reason.
func (s *Files) Skipped() []FileStatus {
	var out []FileStatus
	for _, st := range s.Status() {
		if !st.Applied {
			out = append(out, st)
		}
	}
	return out
}
