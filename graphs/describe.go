package graphs

import (
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// Node kinds.
const (
	KindInput   = "input"
	KindDerived = "derived"
	KindIndex   = "index"
)

// node is one collection of the graph with its live counters.
type node struct {
	name     string
	kind     string
	input    string
	declared []string
	size     func() int
	syncer   krt.Syncer

	recomputes atomic.Uint64
	events     atomic.Uint64
	lastChange atomic.Int64 // unix nanoseconds; 0 = never
}

// Description is a read-only view of a krt graph: its collections, their primary inputs, and the
// collections their transforms Fetch from, with sizes and live counters.
type Description struct {
	debugger *krt.DebugHandler

	mu    sync.RWMutex
	nodes []*node
}

// NewDescription starts an empty description. With a debugger, Fetch dependencies are also read
// from krt's own bookkeeping (what transforms really fetched).
func NewDescription(debugger *krt.DebugHandler) *Description {
	return &Description{debugger: debugger}
}

func (d *Description) add(n *node) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nodes = append(d.nodes, n)
}

// AddInput records an input collection and counts its events.
func AddInput[T any](d *Description, name string, c krt.Collection[T]) {
	register(d, &node{name: name, kind: KindInput}, c)
}

// AddIndex records a collection that groups another by an index key.
func AddIndex[T any](d *Description, name, input string, c krt.Collection[T]) {
	register(d, &node{name: name, kind: KindIndex, input: input}, c)
}

// Derive builds krt.NewCollection(parent, f) named name, records it in d with its primary input
// and the collections f Fetches (declared), and counts its recomputations and output events.
func Derive[I, O any](d *Description, opts krt.OptionsBuilder, name, input string, parent krt.Collection[I],
	declared []string, f krt.TransformationSingle[I, O],
) krt.Collection[O] {
	n := &node{name: name, kind: KindDerived, input: input, declared: declared}
	return register(d, n, krt.NewCollection(parent, func(ctx krt.HandlerContext, i I) *O {
		n.recomputes.Add(1)
		return f(ctx, i)
	}, opts.WithName(name)...))
}

// register completes a node with its collection and adds it to the description.
func register[T any](d *Description, n *node, c krt.Collection[T]) krt.Collection[T] {
	n.syncer = c
	n.size = func() int { return len(c.List()) }
	watch(n, c)
	d.add(n)
	return c
}

// DeriveMany is Derive for a one-to-many transform.
func DeriveMany[I, O any](d *Description, opts krt.OptionsBuilder, name, input string, parent krt.Collection[I],
	declared []string, f krt.TransformationMulti[I, O],
) krt.Collection[O] {
	n := &node{name: name, kind: KindDerived, input: input, declared: declared}
	return register(d, n, krt.NewManyCollection(parent, func(ctx krt.HandlerContext, i I) []O {
		n.recomputes.Add(1)
		return f(ctx, i)
	}, opts.WithName(name)...))
}

func watch[T any](n *node, c krt.Collection[T]) {
	c.RegisterBatch(func(evs []krt.Event[T]) {
		n.events.Add(uint64(len(evs)))
		n.lastChange.Store(time.Now().UnixNano())
	}, false)
}

// HasSynced reports whether every collection has synced.
func (d *Description) HasSynced() bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, n := range d.nodes {
		if !n.syncer.HasSynced() {
			return false
		}
	}
	return true
}

// WaitUntilSynced blocks until every collection has synced, or stop is closed.
func (d *Description) WaitUntilSynced(stop <-chan struct{}) bool {
	d.mu.RLock()
	nodes := slices.Clone(d.nodes)
	d.mu.RUnlock()
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
	// Observed is true when krt recorded the Fetch at run time (not only declared by the wiring).
	Observed bool `json:"observed,omitempty"`
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

// Counters reads sizes and counters now, without dependencies (cheap).
func (d *Description) Counters() []NodeInfo {
	d.mu.RLock()
	nodes := slices.Clone(d.nodes)
	d.mu.RUnlock()
	return counters(nodes)
}

func counters(nodes []*node) []NodeInfo {
	out := make([]NodeInfo, 0, len(nodes))
	for _, n := range nodes {
		ni := NodeInfo{
			Name:       n.name,
			Kind:       n.kind,
			Input:      n.input,
			Size:       n.size(),
			Synced:     n.syncer.HasSynced(),
			Recomputes: n.recomputes.Load(),
			Events:     n.events.Load(),
		}
		if t := n.lastChange.Load(); t != 0 {
			tt := time.Unix(0, t).UTC()
			ni.LastChange = &tt
		}
		out = append(out, ni)
	}
	return out
}

// LastInputChange is when an input collection last emitted an event (zero if never).
func (d *Description) LastInputChange() time.Time {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var last int64
	for _, n := range d.nodes {
		if n.kind == KindInput {
			last = max(last, n.lastChange.Load())
		}
	}
	if last == 0 {
		return time.Time{}
	}
	return time.Unix(0, last)
}

// Snapshot reads sizes, counters and dependencies now.
func (d *Description) Snapshot() Snapshot {
	d.mu.RLock()
	nodes := slices.Clone(d.nodes)
	d.mu.RUnlock()
	observed := d.observedDependencies()
	infos := counters(nodes)
	var s Snapshot
	for i, n := range nodes {
		ni := infos[i]
		if n.input != "" {
			s.Edges = append(s.Edges, EdgeInfo{From: n.input, To: n.name, Kind: EdgeInput, Observed: true})
		}
		deps := map[string]bool{}
		for _, dep := range n.declared {
			deps[dep] = false
		}
		for dep := range observed[n.name] {
			deps[dep] = true
		}
		for _, dep := range collections.SortedKeys(deps) {
			ni.Dependencies = append(ni.Dependencies, dep)
			s.Edges = append(s.Edges, EdgeInfo{From: dep, To: n.name, Kind: EdgeFetch, Observed: deps[dep]})
		}
		s.Nodes = append(s.Nodes, ni)
	}
	return s
}

// observedDependencies reads, from krt's debug dump, which collections each collection's
// transforms Fetched: name → set of dependency names.
func (d *Description) observedDependencies() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	if d.debugger == nil {
		return out
	}
	raw, err := json.Marshal(d.debugger)
	if err != nil {
		return out
	}
	var dump []struct {
		Name  string `json:"name"`
		State struct {
			Inputs map[string]struct {
				Dependencies []string `json:"dependencies"`
			} `json:"inputs"`
		} `json:"state"`
	}
	if err := json.Unmarshal(raw, &dump); err != nil {
		return out
	}
	for _, c := range dump {
		for _, in := range c.State.Inputs {
			for _, dep := range in.Dependencies {
				if out[c.Name] == nil {
					out[c.Name] = map[string]bool{}
				}
				out[c.Name][dep] = true
			}
		}
	}
	return out
}
