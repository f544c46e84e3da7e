package collections

import (
	"runtime"
	"sync"
	"weak"
)

// Values held many times (a label set on every Pod of a Deployment, a zone on every endpoint of
// it) are shared by content, three ways, each for what the others cannot hold:
//   - strings (label values, annotation values, names): unique.Make, the runtime's own table,
//     for a string is comparable and small, and the copy Value gives is the string header;
//   - label sets (Labels): a map is not comparable, so it can be neither a unique.Handle nor a
//     Shared key: sets are found by a hash of their content, in buckets of weak pointers;
//   - comparable structs read through a pointer (Shared, below: the parts of endpoint metadata,
//     Pods' owners): a unique.Handle's Value copies the struct at every read, where a *T is read
//     in place and compared as one word.
//
// Each entry goes with its last holder (a weak pointer and a cleanup).

// Shared interns values by content: Get returns one pointer per distinct value for as long as
// some holder keeps it, and the entry goes with its last holder (a weak pointer and a cleanup,
// as Labels do). The zero value is ready to use. Values must not be changed through the
// pointers it returns.
type Shared[T comparable] struct {
	mu sync.Mutex
	m  map[T]weak.Pointer[T]
}

// Get returns the shared copy of v.
func (s *Shared[T]) Get(v T) *T {
	s.mu.Lock()
	defer s.mu.Unlock()
	if wp, ok := s.m[v]; ok {
		if p := wp.Value(); p != nil {
			return p
		}
	}
	if s.m == nil {
		s.m = map[T]weak.Pointer[T]{}
	}
	p := new(T)
	*p = v
	wp := weak.Make(p)
	s.m[v] = wp
	runtime.AddCleanup(p, s.forget, sharedEntry[T]{v, wp})
	return p
}

type sharedEntry[T comparable] struct {
	v  T
	wp weak.Pointer[T]
}

// forget drops an entry whose value was collected, unless it was replaced since.
func (s *Shared[T]) forget(e sharedEntry[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[e.v] == e.wp {
		delete(s.m, e.v)
	}
}

// Len is the number of distinct values held (collected ones included until their cleanup ran).
func (s *Shared[T]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// SharedTables are the process-wide tables of values shared by content (label sets, the parts of
// endpoint metadata, Pods' owners), for memory accounting: what they hold beyond the shared values themselves.
func SharedTables() any {
	return &struct {
		Labels     any
		Workloads  *Shared[WorkloadMeta]
		Topologies *Shared[TopologyMeta]
		PodOwners  *Shared[PodOwner]
	}{&interned, &workloadMetas, &topologyMetas, &podOwners}
}

// sameValue compares two pointers by what they point at (nil equals only nil).
func sameValue[T comparable](a, b *T) bool { return a == b || a != nil && b != nil && *a == *b }
