package sources

import (
	"fmt"
	"strings"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// problemSet is the part of a manifests source that publishes why files are not applied as
// they stand: it holds the Problems collection and the files whose problems must be written
// again (dirty). What a file's problems are is for the caller to say (fileProblems). It is not
// safe for concurrent use, but for the collection: Files' lock guards marks and pending, and
// the writes go out without it.
type problemSet struct {
	// dirty lists files whose problems must be recomputed at the end of a batch.
	dirty map[string]bool
	c     krt.StaticCollection[collections.ObjectProblems]
}

// problemUpdate is the problems of one file (key) as they stand now (nil: none).
type problemUpdate struct {
	key string
	op  *collections.ObjectProblems
}

func newProblemSet(c krt.StaticCollection[collections.ObjectProblems]) *problemSet {
	return &problemSet{dirty: map[string]bool{}, c: c}
}

// mark notes that the problems of the files may have changed.
func (ps *problemSet) mark(paths ...string) {
	for _, p := range paths {
		ps.dirty[p] = true
	}
}

// pending returns the problems of the files marked, as describe says they stand (by the name
// they go by, nil: none), and clears the marks.
func (ps *problemSet) pending(describe func(p string) (name string, op *collections.ObjectProblems)) []problemUpdate {
	ups := make([]problemUpdate, 0, len(ps.dirty))
	for p := range ps.dirty {
		name, op := describe(p)
		ups = append(ups, problemUpdate{key: KindManifestFile + "/" + name, op: op})
	}
	clear(ps.dirty)
	return ups
}

// write writes problem updates to the collection.
func (ps *problemSet) write(ups []problemUpdate) {
	for _, u := range ups {
		if u.op == nil {
			ps.c.DeleteObject(u.key)
		} else {
			ps.c.ConditionalUpdateObject(*u.op)
		}
	}
}

// replace makes the collection hold exactly want (by resource name), and clears the marks: the
// files were renamed (the link re-pointed), so problems under names no longer known go.
func (ps *problemSet) replace(want map[string]collections.ObjectProblems) {
	clear(ps.dirty)
	for _, op := range ps.c.List() {
		if _, ok := want[op.ResourceName()]; !ok {
			ps.c.DeleteObject(op.ResourceName())
		}
	}
	for _, op := range want {
		ps.c.ConditionalUpdateObject(op)
	}
}

// fileProblems are the problems of one file, named name (nil: none); rel names the other files
// its objects' winners are.
func fileProblems(name string, fs *fileState, rel func(string) string) *collections.ObjectProblems {
	if fs == nil {
		return nil
	}
	op := collections.ObjectProblems{Kind: KindManifestFile, Object: name}
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
			lines = append(lines, k+" is also defined in "+rel(fs.shadowed[k])+", which wins")
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

// linkProblems are the problems of the link named name, when it leads nowhere (nil: none).
func linkProblems(name string, p *collections.Problem) *collections.ObjectProblems {
	if p == nil {
		return nil
	}
	pr := *p
	pr.Kind, pr.Object = KindManifestFile, name
	return &collections.ObjectProblems{Kind: KindManifestFile, Object: name, Problems: []collections.Problem{pr}}
}

// sameProblem reports whether two problems (nil: none) are the same.
func sameProblem(a, b *collections.Problem) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && *a == *b)
}
