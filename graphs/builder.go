package graphs

import (
	"reflect"
	"slices"
	"time"

	"istio.io/istio/pkg/kube/controllers"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// metaNode is the krt metadata key under which a collection built through a Description carries
// its node's name: how the collections a transform reads are found among the nodes (krt keeps
// its own identity of a collection unexported; Metadata is public, and its adapters, a
// singleton's collection among them, pass it through).
const metaNode = "krteds.io/node"

// options are the krt options of the node named name: its name, and the metadata naming it.
func (d *Description) options(name string) []krt.CollectionOption {
	return append(d.opts.WithName(name), krt.WithMetadata(krt.Metadata{metaNode: d.prefix + name}))
}

// nameOf finds the collection a transform reads among the nodes: by the name it carries when the
// Description built it, else (an input, built by a source) as the same collection value.
func (d *Description) nameOf(c any) string {
	if m, ok := c.(interface{ Metadata() krt.Metadata }); ok {
		if name, ok := m.Metadata()[metaNode].(string); ok {
			return name
		}
	}
	if c == nil || !reflect.ValueOf(c).Comparable() {
		return ""
	}
	d.s.mu.RLock()
	defer d.s.mu.RUnlock()
	for _, n := range d.s.nodes {
		if n.coll != nil && reflect.TypeOf(n.coll) == reflect.TypeOf(c) && n.coll == c {
			return n.name
		}
	}
	return ""
}

// Input records an input collection.
func Input[T any](d *Description, name string, c krt.Collection[T]) krt.Collection[T] {
	return register(d, &node{name: d.prefix + name, kind: KindInput}, c)
}

// Index groups a collection by an index key, as a collection of its own.
func Index[K comparable, T any](d *Description, name, input string, idx krt.Index[K, T]) krt.Collection[krt.IndexObject[K, T]] {
	return register(d, &node{name: d.prefix + name, kind: KindIndex, input: d.prefix + input}, krt.Collection[krt.IndexObject[K, T]](idx.AsCollection(d.options(name)...)))
}

// Derive builds the collection of a one-to-one transform over its primary input.
func Derive[I, O any](d *Description, name string, parent krt.Collection[I], t transforms.Single[I, O]) krt.Collection[O] {
	n := d.derived(name, parent, t.Reads)
	return register(d, n, krt.NewCollection(parent, func(ctx krt.HandlerContext, i I) *O {
		n.recomputes.Add(1)
		return t.Fn(ctx, i)
	}, d.options(name)...))
}

// DeriveMany builds the collection of a one-to-many transform.
func DeriveMany[I, O any](d *Description, name string, parent krt.Collection[I], t transforms.Many[I, O]) krt.Collection[O] {
	n := d.derived(name, parent, t.Reads)
	return register(d, n, krt.NewManyCollection(parent, func(ctx krt.HandlerContext, i I) []O {
		n.recomputes.Add(1)
		return t.Fn(ctx, i)
	}, d.options(name)...))
}

// DeriveChecked builds the collection of a checked transform, and the collection of the problems
// it finds in its inputs (named name+"/problems"), which follows the inputs: an entry appears
// when an object is found wrong and goes when it is fixed or removed.
func DeriveChecked[I controllers.Object, O any](d *Description, name string, parent krt.Collection[I], t transforms.Checked[I, O]) (krt.Collection[O], krt.Collection[collections.ObjectProblems]) {
	n := d.derived(name, parent, t.Reads)
	status, out := krt.NewStatusCollection(parent, func(ctx krt.HandlerContext, i I) (*collections.ObjectProblems, *O) {
		n.recomputes.Add(1)
		return t.Fn(ctx, i)
	}, d.options(name)...)
	register(d, n, out)
	d.s.mu.Lock()
	d.s.held = append(d.s.held, NamedCollection{Name: d.prefix + name + "/status", Kind: KindDerived, Collection: status})
	d.s.mu.Unlock()
	// The problems come from the same transform over the same input: the graph shows that input
	// as theirs (the status collection between them is krt's plumbing, not a node).
	pn := &node{name: d.prefix + name + "/problems", kind: KindDerived, input: d.nameOf(parent)}
	problems := register(d, pn, krt.NewCollection(status, func(_ krt.HandlerContext, s krt.ObjectWithStatus[I, collections.ObjectProblems]) *collections.ObjectProblems {
		pn.recomputes.Add(1)
		p := s.Status
		return &p
	}, d.options(name+"/problems")...))
	return out, problems
}

// Join builds the union of collections of one type whose keys do not overlap (krt does not check
// them: the join keeps no state of its own); each is a primary input.
func Join[T any](d *Description, name string, cs ...krt.Collection[T]) krt.Collection[T] {
	return join(d, name, true, cs)
}

// JoinFirst builds the union of collections of one type whose keys may overlap: the item of the
// first collection that has a key wins.
func JoinFirst[T any](d *Description, name string, cs ...krt.Collection[T]) krt.Collection[T] {
	return join(d, name, false, cs)
}

func join[T any](d *Description, name string, unchecked bool, cs []krt.Collection[T]) krt.Collection[T] {
	n := &node{name: d.prefix + name, kind: KindDerived, input: d.nameOf(cs[0])}
	for _, c := range cs[1:] {
		if rn := d.nameOf(c); rn != "" {
			n.joined = append(n.joined, rn)
		}
	}
	opts := d.options(name)
	if unchecked {
		opts = append(opts, krt.WithJoinUnchecked())
	}
	j := krt.JoinCollection(cs, opts...)
	n.outputs = func() map[string]any {
		out := map[string]any{}
		for _, o := range j.List() {
			out[krt.GetKey(o)] = o
		}
		return out
	}
	return register(d, n, j)
}

// DeriveFromNothing builds the collection of a transform without a primary input: it reads only
// what it Fetches.
func DeriveFromNothing[O any](d *Description, name string, t transforms.Many[struct{}, O]) krt.Collection[O] {
	n := d.derived(name, nil, t.Reads)
	return register(d, n, krt.NewManyFromNothing(func(ctx krt.HandlerContext) []O {
		n.recomputes.Add(1)
		return t.Fn(ctx, struct{}{})
	}, d.options(name)...))
}

// Singleton builds a derived single value.
func Singleton[T any](d *Description, name string, f krt.TransformationEmpty[T], reads []any) krt.Singleton[T] {
	n := d.derived(name, nil, reads)
	s := krt.NewSingleton(func(ctx krt.HandlerContext) *T {
		n.recomputes.Add(1)
		return f(ctx)
	}, d.options(name)...)
	register(d, n, s.AsCollection())
	return s
}

func (d *Description) derived(name string, parent any, reads []any) *node {
	n := &node{name: d.prefix + name, kind: KindDerived, input: d.nameOf(parent)}
	for _, r := range reads {
		if rn := d.nameOf(r); rn != "" && !slices.Contains(n.reads, rn) {
			n.reads = append(n.reads, rn)
		}
	}
	slices.Sort(n.reads)
	return n
}

// register completes a node with its collection, follows its events and adds it.
func register[T any](d *Description, n *node, c krt.Collection[T]) krt.Collection[T] {
	n.syncer = c
	n.coll = c
	c.RegisterBatch(func(evs []krt.Event[T]) {
		for _, e := range evs {
			switch {
			case e.Old == nil && e.New != nil:
				n.size.Add(1)
			case e.Old != nil && e.New == nil:
				n.size.Add(-1)
			}
		}
		n.events.Add(uint64(len(evs)))
		n.lastChange.Store(time.Now().UnixNano())
	}, true)
	d.add(n)
	return c
}
