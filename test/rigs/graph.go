// Package rigs builds krteds for tests, one rig per layer, shared by every package that tests
// that layer:
//
//   - Graph, the graph layer: static input collections seeded with objects → graphs.Build,
//     and the graph as the xDS server reads it, source.New (the graphs tests, outputs/source,
//     outputs/explain, test/serving, test/bench);
//   - Serving, the serving layer: a Graph served by the xDS server over ADS on loopback, and
//     client connections to it (test/serving, test/bench);
//   - App, the process layer in process: app.Start, what `krteds serve` runs, with its xDS port
//     (and a debug port where asked) on loopback (cmd/krteds/app, test/e2e, test/bench).
//
// Each rig waits the one way tests wait (fixtures.Waker), on the signals its layer offers: the
// graph's collection events, and the xDS server taking each change of the graph. The layers
// below and beside these keep rigs of their own, because they differ: the manifests source alone
// (collections/sources' harness), the xDS server over a fake source (outputs/xds), the binary
// run as a process (test/e2e), a herd's server in a process of its own so that its memory is
// measured apart (test/bench), and krteds replicas under a real control loop (test/scale).
package rigs

import (
	"sync"
	"testing"
	"time"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/collections/sources"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs/source"
	"github.com/krteds/krteds/test/fixtures"
)

// Timeout is how long a rig's wait waits.
const Timeout = 10 * time.Second

// Graph is the graph layer's rig: krteds' graph over static input collections.
type Graph struct {
	*graphs.Graph
	// Served is the graph as the xDS server reads it: proxies connect to it, and it resolves
	// what they are sent.
	Served *source.Source
	// In are the static inputs; Apply writes to them.
	In sources.Static
	// RemoteClusters are the remote clusters (GraphOptions.Remote), empty at first.
	RemoteClusters krt.StaticCollection[*collections.Cluster]
	// Stop stops the graph's collections.
	Stop <-chan struct{}
	// Debugger is the krt debug handler the collections are registered with (nil without one).
	Debugger *krt.DebugHandler

	tb testing.TB
	// owned: the graph stops with the test (GraphOptions.Stop was nil).
	owned bool
	// waker wakes the graph's waits: on the outputs' events once a wait has asked (watch), and
	// on the xDS server's changes when it serves the graph (Serving).
	waker *fixtures.Waker
	watch sync.Once
}

// GraphOptions build a Graph otherwise than NewGraph does; the zero value is NewGraph's.
type GraphOptions struct {
	// Config is the graph's configuration (zero: istiod's defaults).
	Config collections.Config
	// Stop stops the graph (nil: the test's end). A graph given its Stop is its owner's: nothing
	// of it is left to the test's end (a benchmark builds one per iteration), and a Serving of it
	// stops on Close only.
	Stop chan struct{}
	// NoDebugger builds the graph without a krt debug handler, as the benchmarks measure it.
	NoDebugger bool
	// Synced holds the inputs unsynced until it has synced (nil: synced once seeded); the graph
	// is then returned without waiting for its sync, as with NoWait.
	Synced krt.Syncer
	// Remote gives the graph a collection of remote clusters, Graph.RemoteClusters.
	Remote bool
	// NoWait returns the graph at once, without waiting for its sync (a cold start measures it).
	NoWait bool
}

// ObjectsOf decodes manifests (as sources.Decode) and returns the typed objects krteds reads, in
// document order: what a rig, or the app, is given to serve.
func ObjectsOf(data []byte) ([]any, error) {
	d, err := sources.Decode(data, nil)
	if err != nil {
		return nil, err
	}
	out := make([]any, 0, len(d.Objects))
	for _, o := range d.Objects {
		out = append(out, o.Obj)
	}
	return out, nil
}

// NewGraph builds the graph over objs, with istiod's default configuration, and waits until it
// has synced.
func NewGraph(tb testing.TB, objs ...any) *Graph {
	tb.Helper()
	return NewGraphWith(tb, GraphOptions{}, objs...)
}

// NewGraphWith builds the graph over objs as o says.
func NewGraphWith(tb testing.TB, o GraphOptions, objs ...any) *Graph {
	tb.Helper()
	stop := o.Stop
	if stop == nil {
		stop = make(chan struct{})
		tb.Cleanup(func() { close(stop) })
	}
	var debugger *krt.DebugHandler
	if !o.NoDebugger {
		debugger = new(krt.DebugHandler)
	}
	opts := krt.NewOptionsBuilder(stop, "", debugger)
	in := sources.NewStatic(opts, o.Synced, objs...)
	inputs := in.Inputs()
	g := &Graph{In: in, Stop: stop, Debugger: debugger, tb: tb, owned: o.Stop == nil, waker: fixtures.NewWaker()}
	if o.Remote {
		g.RemoteClusters = krt.NewStaticCollection[*collections.Cluster](nil, nil, opts.WithName(collections.NameRemoteClusters)...)
		inputs.RemoteClusters = g.RemoteClusters
	}
	g.Graph = graphs.Build(o.Config, inputs, opts)
	g.Served = source.New(g.Graph)
	if o.Synced == nil && !o.NoWait && !g.WaitUntilSynced(stop) {
		tb.Fatal("the graph did not sync")
	}
	return g
}

// GraphOf is the rig's view of a graph built otherwise (over informers, or by the app): its
// waits.
func GraphOf(tb testing.TB, g *graphs.Graph) *Graph {
	return &Graph{Graph: g, Served: source.New(g), tb: tb, waker: fixtures.NewWaker()}
}

// RemoteCluster is a remote cluster of static inputs.
type RemoteCluster struct {
	*collections.Cluster
	// In are its inputs; Apply writes to them.
	In sources.Static
	// Leave closes the cluster's collections (the test's end does, if nothing before).
	Leave func()
}

// Remote makes a remote cluster holding objs, registered with the graph's debug handler; it joins
// once added to RemoteClusters.
func (g *Graph) Remote(id string, objs ...any) *RemoteCluster {
	stop := make(chan struct{})
	leave := sync.OnceFunc(func() { close(stop) })
	g.tb.Cleanup(leave)
	in := sources.NewStatic(krt.NewOptionsBuilder(stop, id, g.Debugger), nil, objs...)
	return &RemoteCluster{Cluster: &collections.Cluster{ID: id, Source: "test", Inputs: in.Inputs(), Stop: stop}, In: in, Leave: leave}
}

// Waker is woken by every event of the graph's outputs: the endpoints, the services, the
// policies, the proxies and their classes and views, the xDS resources and the problems (from
// its first use until the test ends).
func (g *Graph) Waker() *fixtures.Waker {
	g.watch.Do(func() {
		w := g.waker
		fixtures.WakeOn(g.tb, w, g.SliceEndpoints)
		fixtures.WakeOn(g.tb, w, g.ServiceEndpoints)
		fixtures.WakeOn(g.tb, w, g.ServiceInfos)
		fixtures.WakeOn(g.tb, w, g.ServicePolicies)
		fixtures.WakeOn(g.tb, w, g.ConnectedProxies)
		fixtures.WakeOn(g.tb, w, g.Proxies)
		fixtures.WakeOn(g.tb, w, g.ProxyClasses)
		fixtures.WakeOn(g.tb, w, g.Views)
		fixtures.WakeOn(g.tb, w, g.CLAs)
		fixtures.WakeOn(g.tb, w, g.Graph.Clusters)
		fixtures.WakeOn(g.tb, w, g.Listeners)
		fixtures.WakeOn(g.tb, w, g.Routes)
		fixtures.WakeOn(g.tb, w, g.Problems)
	})
	return g.waker
}

// Await waits, on the graph's events (Waker), until cond holds; it fails the test after Timeout
// with what and cond's last detail.
func (g *Graph) Await(tb testing.TB, what string, cond func() (bool, string)) {
	tb.Helper()
	g.Waker().Await(tb, Timeout, what, cond)
}
