package graphs

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"istio.io/istio/pkg/kube/krt"
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
