package graphs

import (
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"istio.io/istio/pkg/kube/controllers"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// Node kinds.
const (
	KindInput   = "input"
	KindDerived = "derived"
	KindIndex   = "index"
)

// node is one collection of the graph with its live counters, kept from its own events so that
// reading them costs nothing per object.
type node struct {
	name  string
	kind  string
	input string
	// joined are a join's primary inputs after the first.
	joined []string
	// outputs lists a join's outputs by key: krt's debug handler does not hold joins.
	outputs func() map[string]any
	reads   []string
	syncer  krt.Syncer
	// coll is the collection, to find an input among the nodes by (see nameOf).
	coll any

	size       atomic.Int64
	recomputes atomic.Uint64
	events     atomic.Uint64
	lastChange atomic.Int64 // unix nanoseconds; 0 = never
}

// Description is a read-only view of a krt graph: its collections, their primary inputs and the
// collections their transforms read, with sizes and live counters.
type Description struct {
	opts krt.OptionsBuilder
	// prefix starts the names of the collections built through this description ("<cluster>/"
	// for a remote cluster's).
	prefix string
	s      *descriptionState
}

type descriptionState struct {
	mu    sync.RWMutex
	nodes []*node
	// held are collections krt builds alongside a node (a checked transform's status), which hold
	// memory but are not drawn.
	held []NamedCollection
}

// NamedCollection is one collection of the graph.
type NamedCollection struct {
	Name       string
	Kind       string
	Collection any
}

// Collections lists the graph's collections in dataflow order, inputs first, then the
// collections krt keeps alongside them.
func (d *Description) Collections() []NamedCollection {
	d.s.mu.RLock()
	defer d.s.mu.RUnlock()
	out := make([]NamedCollection, 0, len(d.s.nodes)+len(d.s.held))
	for _, n := range d.s.nodes {
		out = append(out, NamedCollection{Name: n.name, Kind: n.kind, Collection: n.syncer})
	}
	return append(out, d.s.held...)
}

func newDescription(opts krt.OptionsBuilder) *Description {
	return &Description{opts: opts, s: &descriptionState{}}
}

// scoped describes, in the same graph, collections built with their own options: names under
// prefix (which must be the options' name prefix) and the options' stop channel. When that
// closes, the collections leave the description.
func (d *Description) scoped(prefix string, opts krt.OptionsBuilder) *Description {
	sd := &Description{opts: opts, prefix: prefix + "/", s: d.s}
	go func() {
		<-opts.Stop()
		d.s.mu.Lock()
		defer d.s.mu.Unlock()
		d.s.nodes = slices.DeleteFunc(d.s.nodes, func(n *node) bool { return strings.HasPrefix(n.name, sd.prefix) })
		d.s.held = slices.DeleteFunc(d.s.held, func(c NamedCollection) bool { return strings.HasPrefix(c.Name, sd.prefix) })
	}()
	return sd
}

func (d *Description) add(n *node) {
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	d.s.nodes = append(d.s.nodes, n)
}

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

// JoinDump is a join's outputs in the shape of krt's debug dump, which does not hold joins.
type JoinDump struct {
	Name  string `json:"name"`
	State struct {
		Outputs map[string]any `json:"outputs"`
		Synced  bool           `json:"synced"`
	} `json:"state"`
}

// JoinDumps dumps the joins of the graph.
func (d *Description) JoinDumps() []JoinDump {
	d.s.mu.RLock()
	nodes := slices.Clone(d.s.nodes)
	d.s.mu.RUnlock()
	var out []JoinDump
	for _, n := range nodes {
		if n.outputs == nil {
			continue
		}
		j := JoinDump{Name: n.name}
		j.State.Outputs, j.State.Synced = n.outputs(), n.syncer.HasSynced()
		out = append(out, j)
	}
	return out
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

// HasSynced reports whether every collection has synced.
func (d *Description) HasSynced() bool {
	d.s.mu.RLock()
	defer d.s.mu.RUnlock()
	for _, n := range d.s.nodes {
		if !n.syncer.HasSynced() {
			return false
		}
	}
	return true
}

// WaitUntilSynced blocks until every collection has synced, or stop is closed.
func (d *Description) WaitUntilSynced(stop <-chan struct{}) bool {
	d.s.mu.RLock()
	nodes := slices.Clone(d.s.nodes)
	d.s.mu.RUnlock()
	for _, n := range nodes {
		if !n.syncer.WaitUntilSynced(stop) {
			return false
		}
	}
	return true
}

// NodeInfo describes one collection.
type NodeInfo struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Input is the primary input collection of a derived collection.
	Input        string     `json:"input,omitempty"`
	Size         int        `json:"size"`
	Synced       bool       `json:"synced"`
	Recomputes   uint64     `json:"recomputations"`
	Events       uint64     `json:"events"`
	LastChange   *time.Time `json:"lastChange,omitempty"`
	Dependencies []string   `json:"dependencies,omitempty"`
}

// Edge kinds.
const (
	EdgeInput = "input"
	EdgeFetch = "fetch"
)

// EdgeInfo is a dependency: To reads From, either as its primary input or through Fetch.
type EdgeInfo struct {
	From string `json:"from"`
	To   string `json:"to"`
	Kind string `json:"kind"`
}

// Snapshot is the whole graph at one moment.
type Snapshot struct {
	Nodes []NodeInfo `json:"nodes"`
	Edges []EdgeInfo `json:"edges"`
}

// Node returns the named node, if present.
func (s Snapshot) Node(name string) (NodeInfo, bool) {
	for _, n := range s.Nodes {
		if n.Name == name {
			return n, true
		}
	}
	return NodeInfo{}, false
}

// Snapshot reads sizes, counters and dependencies now, at a cost per collection, not per object.
func (d *Description) Snapshot() Snapshot {
	d.s.mu.RLock()
	nodes := slices.Clone(d.s.nodes)
	d.s.mu.RUnlock()
	var s Snapshot
	for _, n := range nodes {
		ni := NodeInfo{
			Name: n.name, Kind: n.kind, Input: n.input, Size: int(n.size.Load()), Synced: n.syncer.HasSynced(),
			Recomputes: n.recomputes.Load(), Events: n.events.Load(), Dependencies: n.reads,
		}
		if t := n.lastChange.Load(); t != 0 {
			tt := time.Unix(0, t).UTC()
			ni.LastChange = &tt
		}
		if n.input != "" {
			s.Edges = append(s.Edges, EdgeInfo{From: n.input, To: n.name, Kind: EdgeInput})
		}
		for _, in := range n.joined {
			s.Edges = append(s.Edges, EdgeInfo{From: in, To: n.name, Kind: EdgeInput})
		}
		for _, dep := range n.reads {
			s.Edges = append(s.Edges, EdgeInfo{From: dep, To: n.name, Kind: EdgeFetch})
		}
		s.Nodes = append(s.Nodes, ni)
	}
	return s
}
