package source

import (
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/eds"
)

// emptyCLAs caches the resources made per request for names a client may choose: the empty
// ClusterLoadAssignments of names no proxy may have, the unknown-subset CLAs named for the
// cluster asked for, and the listeners of Kubernetes services under their short names (by source
// resource and name). A relabelled entry of an outdated source is never hit again and goes with
// the next reset.
type emptyCLAs struct {
	empty      *collections.Memo[string, *collections.Resource]
	relabelled *collections.Memo[relabelKey, *collections.Resource]
}

type relabelKey struct {
	src  *collections.Resource
	name string
}

func newEmptyCLAs() *emptyCLAs {
	size := func(r *collections.Resource) int { return len(r.Body) }
	return &emptyCLAs{
		empty:      collections.NewMemo[string, *collections.Resource]("empty CLAs of unknown names", 10000, 0, nil),
		relabelled: collections.NewMemo[relabelKey]("relabelled CLAs and listener aliases", 4096, 64<<20, size),
	}
}

// relabel is src under another name (relabel makes it: an unknown subset's CLA with its
// cluster_name set to name, a listener under an alias); nil if relabel cannot.
func (e *emptyCLAs) relabel(src *collections.Resource, name string, relabel func(*collections.Resource, string) *collections.Resource) *collections.Resource {
	r, _ := e.relabelled.Get(relabelKey{src, name}, func() (*collections.Resource, bool) {
		r := relabel(src, name)
		return r, r != nil
	})
	return r
}

// get is the empty CLA of a name no proxy may have.
func (e *emptyCLAs) get(name string) *collections.Resource {
	r, _ := e.empty.Get(name, func() (*collections.Resource, bool) {
		r := eds.EmptyCLA(name)
		r.Absent = true
		return r, true
	})
	return r
}

// Memos are the graph's bounded caches: of resources made per request, and of the workload
// identities its transforms derive.
func (s *Source) Memos() []collections.MemoStats {
	return append([]collections.MemoStats{s.empty.empty.Stats(), s.empty.relabelled.Stats()}, s.g.Memos()...)
}
