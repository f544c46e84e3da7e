package sources

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/krteds/krteds/collections"
)

// file returns the state of a file, creating it (s.mu held).
func (s *Files) file(p string) *fileState {
	fs := s.files[p]
	if fs == nil {
		fs = &fileState{}
		s.files[p] = fs
	}
	return fs
}

// setProblem records why a file's current content is not applied; it keeps its objects.
func (s *Files) setProblem(p string, prob *collections.Problem, hash uint64) {
	s.mu.Lock()
	fs := s.file(p)
	fs.problem, fs.failHash, fs.waiting = prob, hash, false
	s.dirty[p] = true
	s.mu.Unlock()
	s.flushProblems()
}

// setLinkProblem records (nil: clears) why the link leads nowhere.
func (s *Files) setLinkProblem(p *collections.Problem) {
	s.mu.Lock()
	same := (p == nil && s.linkProblem == nil) || (p != nil && s.linkProblem != nil && *p == *s.linkProblem)
	s.linkProblem = p
	s.mu.Unlock()
	if same {
		return
	}
	key := KindManifestFile + "/" + filepath.Base(s.given)
	if p == nil {
		s.problems.DeleteObject(key)
		return
	}
	pr := *p
	pr.Kind, pr.Object = KindManifestFile, filepath.Base(s.given)
	s.problems.ConditionalUpdateObject(collections.ObjectProblems{Kind: KindManifestFile, Object: pr.Object, Problems: []collections.Problem{pr}})
}

// reconcileProblems makes the Problems collection hold exactly the problems of the files known.
func (s *Files) reconcileProblems() {
	s.mu.Lock()
	want := map[string]collections.ObjectProblems{}
	for p := range s.files {
		if op := s.problemsOf(p); op != nil {
			want[op.ResourceName()] = *op
		}
	}
	if s.linkProblem != nil {
		pr := *s.linkProblem
		pr.Kind, pr.Object = KindManifestFile, filepath.Base(s.given)
		op := collections.ObjectProblems{Kind: KindManifestFile, Object: pr.Object, Problems: []collections.Problem{pr}}
		want[op.ResourceName()] = op
	}
	clear(s.dirty)
	s.mu.Unlock()
	for _, op := range s.problems.List() {
		if _, ok := want[op.ResourceName()]; !ok {
			s.problems.DeleteObject(op.ResourceName())
		}
	}
	for _, op := range want {
		s.problems.ConditionalUpdateObject(op)
	}
}

// rel is a file's path relative to the source's root, as problems name it (a file root, by the
// name it was given).
func (s *Files) rel(p string) string {
	base := s.root
	if !s.folder {
		if p == s.root {
			return filepath.Base(s.given)
		}
		base = filepath.Dir(s.root)
	}
	if r, err := filepath.Rel(base, p); err == nil {
		return r
	}
	return p
}

// problemsOf computes the problems of one file (s.mu held).
func (s *Files) problemsOf(p string) *collections.ObjectProblems {
	fs := s.files[p]
	if fs == nil {
		return nil
	}
	op := collections.ObjectProblems{Kind: KindManifestFile, Object: s.rel(p)}
	if fs.problem != nil {
		pr := *fs.problem
		pr.Kind, pr.Object = KindManifestFile, op.Object
		if fs.hash != 0 {
			pr.Detail += "; the file's previous objects are kept"
		}
		op.Problems = append(op.Problems, pr)
	}
	if len(fs.shadowed) > 0 || len(fs.dups) > 0 {
		var lines []string
		for _, k := range collections.SortedKeys(fs.shadowed) {
			lines = append(lines, k+" is also defined in "+s.rel(fs.shadowed[k])+", which wins")
		}
		for _, k := range fs.dups {
			lines = append(lines, k+" is defined twice; the later document wins")
		}
		detail := strings.Join(lines[:min(len(lines), 5)], "; ")
		if len(lines) > 5 {
			detail += fmt.Sprintf("; and %d more", len(lines)-5)
		}
		op.Problems = append(op.Problems, collections.Problem{Kind: KindManifestFile, Object: op.Object, Reason: ReasonDuplicateObject, Detail: detail})
	}
	if len(op.Problems) == 0 {
		return nil
	}
	return &op
}

// flushProblems writes the problems of the dirty files to the Problems collection.
func (s *Files) flushProblems() {
	s.mu.Lock()
	type upd struct {
		key string
		op  *collections.ObjectProblems
	}
	var ups []upd
	for p := range s.dirty {
		ups = append(ups, upd{key: KindManifestFile + "/" + s.rel(p), op: s.problemsOf(p)})
	}
	clear(s.dirty)
	s.mu.Unlock()
	for _, u := range ups {
		if u.op == nil {
			s.problems.DeleteObject(u.key)
		} else {
			s.problems.ConditionalUpdateObject(*u.op)
		}
	}
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
	out := make([]FileStatus, 0, len(s.files)+1)
	if s.linkProblem != nil {
		pr := *s.linkProblem
		pr.Kind, pr.Object = KindManifestFile, filepath.Base(s.given)
		out = append(out, FileStatus{Path: pr.Object, Problems: []collections.Problem{pr}})
	}
	for _, p := range collections.SortedKeys(s.files) {
		fs := s.files[p]
		st := FileStatus{Path: s.rel(p), Objects: len(fs.objects), Ignored: fs.ignored, Applied: fs.problem == nil && !fs.waiting, Waiting: fs.waiting}
		if op := s.problemsOf(p); op != nil {
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
