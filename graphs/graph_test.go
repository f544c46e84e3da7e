package graphs_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	istioapimeta "istio.io/api/meta/v1alpha1"
	networking "istio.io/api/networking/v1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

// endpointsState is the graph's final endpoint output, keyed and sorted for comparison.
type endpointsState struct {
	Services map[string]collections.ServiceEndpoints
	Slices   map[string]collections.SliceEndpoints
	// CLAs are the keys of the CLA sets (a shared host's carry its namespace) and the version
	// of each shared CLA.
	CLAs map[string]uint64
}

func stateOf(g *graphs.Graph) endpointsState {
	s := endpointsState{Services: map[string]collections.ServiceEndpoints{}, Slices: map[string]collections.SliceEndpoints{}}
	for _, se := range g.ServiceEndpoints.List() {
		s.Services[se.ResourceName()] = se
	}
	for _, se := range g.SliceEndpoints.List() {
		s.Slices[se.ResourceName()] = se
	}
	s.CLAs = map[string]uint64{}
	for _, set := range g.CLAs.List() {
		if set.Shared != nil {
			s.CLAs[set.Key] = set.Shared.Version
		} else {
			s.CLAs[set.Key] = 0
		}
	}
	return s
}

func addrs(g *rigs.Graph, key string) []string {
	se := g.ServiceEndpoints.GetKey(key)
	if se == nil {
		return nil
	}
	var out []string
	for _, e := range se.Endpoints {
		out = append(out, fmt.Sprintf("%s:%d/%s", e.Address, e.Port, e.Health))
	}
	return out
}

// expectAddrs waits, on the graph's events, until the endpoints of the service key are want.
func expectAddrs(t *testing.T, g *rigs.Graph, key string, want ...string) {
	t.Helper()
	g.Await(t, key+" endpoints", func() (bool, string) {
		got := addrs(g, key)
		return slices.Equal(got, want), fmt.Sprintf("got %v want %v", got, want)
	})
}

func TestLatePodAppearsByItself(t *testing.T) {
	g := rigs.NewGraph(t,
		fixtures.Service("ns1", "foo", fixtures.HTTP...),
		fixtures.ZoneNode("n1", "r1", "z1"),
		fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", "n1"),
		fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
			fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
			fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.Ready}),
	)
	expectAddrs(t, g, "ns1/foo", "10.0.0.1:8080/Healthy")
	g.In.Apply(fixtures.Pod("ns1", "foo-2", "foo", "10.0.0.2", "n1"), false)
	expectAddrs(t, g, "ns1/foo", "10.0.0.1:8080/Healthy", "10.0.0.2:8080/Healthy")
	// The late pod is enriched like any other: locality from its node.
	g.Await(t, "locality of late pod", func() (bool, string) {
		se := g.ServiceEndpoints.GetKey("ns1/foo")
		l := se.Endpoints[1].Meta.Locality
		return l == collections.Locality{Region: "r1", Zone: "z1"}, fmt.Sprint(l)
	})
}

func TestNodeRelabelReachesEndpoints(t *testing.T) {
	g := rigs.NewGraph(t,
		fixtures.Service("ns1", "foo", fixtures.HTTP...),
		fixtures.ZoneNode("n1", "r1", "z1"),
		fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", "n1"),
		fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready}),
	)
	expectAddrs(t, g, "ns1/foo", "10.0.0.1:8080/Healthy")
	g.In.Apply(fixtures.ZoneNode("n1", "r2", "z9"), false)
	g.Await(t, "relabelled locality", func() (bool, string) {
		se := g.ServiceEndpoints.GetKey("ns1/foo")
		m := se.Endpoints[0].Meta
		return m.LocalityLabel == "r2/z9/" && m.LabelValue("topology.kubernetes.io/zone") == "z9", m.LocalityLabel
	})
}

func TestServiceLabelRecomputesHealth(t *testing.T) {
	svc := fixtures.Service("ns1", "foo", fixtures.HTTP...)
	g := rigs.NewGraph(t, svc,
		fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.1", Cond: fixtures.TerminatingServing}))
	expectAddrs(t, g, "ns1/foo", "10.0.0.1:8080/Terminating")
	svc2 := svc.DeepCopy()
	svc2.Labels = map[string]string{"istio.io/persistent-session": "c"}
	g.In.Apply(svc2, false)
	expectAddrs(t, g, "ns1/foo", "10.0.0.1:8080/Draining")
}

func TestDeletesRemoveExactlyWhatTheyShould(t *testing.T) {
	foo := fixtures.Service("ns1", "foo", fixtures.HTTP...)
	bar := fixtures.Service("ns1", "bar", fixtures.HTTP...)
	pod1 := fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", "")
	pod2 := fixtures.Pod("ns1", "foo-2", "foo", "10.0.0.2", "")
	sliceA := fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.Ready})
	sliceB := fixtures.Slice("ns1", "foo-b", "foo", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.3", Cond: fixtures.Ready})
	sliceBar := fixtures.Slice("ns1", "bar-a", "bar", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.1.1", Cond: fixtures.Ready})
	g := rigs.NewGraph(t, foo, bar, pod1, pod2, sliceA, sliceB, sliceBar)
	expectAddrs(t, g, "ns1/foo", "10.0.0.1:8080/Healthy", "10.0.0.2:8080/Healthy", "10.0.0.3:8080/Healthy")
	expectAddrs(t, g, "ns1/bar", "10.0.1.1:8080/Healthy")

	g.In.Apply(pod2, true)
	expectAddrs(t, g, "ns1/foo", "10.0.0.1:8080/Healthy", "10.0.0.3:8080/Healthy")
	g.In.Apply(sliceB, true)
	expectAddrs(t, g, "ns1/foo", "10.0.0.1:8080/Healthy")
	expectAddrs(t, g, "ns1/bar", "10.0.1.1:8080/Healthy")
	g.In.Apply(foo, true)
	g.Await(t, "foo shard removed", func() (bool, string) {
		return g.ServiceEndpoints.GetKey("ns1/foo") == nil, "still present"
	})
	expectAddrs(t, g, "ns1/bar", "10.0.1.1:8080/Healthy")
	// Recreating the Service brings its endpoints back: the slice never went away.
	g.In.Apply(foo, false)
	expectAddrs(t, g, "ns1/foo", "10.0.0.1:8080/Healthy")
}

// op is one write to the inputs.
type op struct {
	obj any
	del bool
}

// history is the ordered writes to one object.
type history []op

func up(o any) op  { return op{obj: o} }
func del(o any) op { return op{obj: o, del: true} }

// orderScenario returns each object's write history. Across objects the order is free; within an
// object it is fixed. The final state is therefore the same for every interleaving.
func orderScenario() []history {
	T, F := fixtures.Ptr(true), fixtures.Ptr(false)
	ns1 := fixtures.Namespace("ns1", nil, nil)
	ns1b := fixtures.Namespace("ns1", nil, map[string]string{"networking.istio.io/traffic-distribution": "PreferClose"})
	sys := fixtures.Namespace("istio-system", map[string]string{"topology.istio.io/network": "net1"}, nil)
	sys2 := fixtures.Namespace("istio-system", map[string]string{"topology.istio.io/network": "net2"}, nil)

	n1 := fixtures.ZoneNode("n1", "r1", "z1")
	n1b := fixtures.ZoneNode("n1", "r1", "z2") // relabelled after endpoints exist
	n2 := fixtures.ZoneNode("n2", "r2", "z3")

	foo := fixtures.Service("ns1", "foo", fixtures.Port{Name: "http", Port: 80, Target: 8080}, fixtures.Port{Name: "grpc", Port: 90, Target: 9090})
	foo2 := foo.DeepCopy()
	foo2.Labels = map[string]string{"istio.io/persistent-session": "x"}
	bar := fixtures.Service("ns1", "bar", fixtures.HTTP...)
	gone := fixtures.Service("ns1", "gone", fixtures.HTTP...)

	foo1 := fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", "n1")
	foo2p := fixtures.Pod("ns1", "foo-2", "foo", "10.0.0.2", "n2")
	foo2relabel := foo2p.DeepCopy()
	foo2relabel.Labels["version"] = "v2"
	foo3 := fixtures.Pod("ns1", "foo-3", "foo", "10.0.0.3", "n1")
	bar1 := fixtures.Pod("ns1", "bar-1", "bar", "10.0.1.1", "n2")

	ports := []fixtures.SlicePort{{Name: "http", Port: 8080}, {Name: "grpc", Port: 9090}}
	fooA := fixtures.Slice("ns1", "foo-a", "foo", ports,
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.Conditions(F, T, T)},
		fixtures.Endpoint{IP: "10.0.0.3", Pod: "foo-3", Cond: fixtures.Ready})
	fooA2 := fooA.DeepCopy()
	fooA2.Endpoints[0].Conditions = fixtures.NotReady
	fooB := fixtures.Slice("ns1", "foo-b", "foo", ports,
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready}, // duplicate of foo-a's
		fixtures.Endpoint{IP: "10.0.0.9", Cond: fixtures.NotReady})
	barA := fixtures.Slice("ns1", "bar-a", "bar", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.1.1", Pod: "bar-1", Cond: fixtures.Ready})
	barAFQDN := barA.DeepCopy()
	barAFQDN.AddressType = discovery.AddressTypeFQDN
	barAFQDN.Endpoints = []discovery.Endpoint{{Addresses: []string{"bar.example.com"}}}
	barB := fixtures.Slice("ns1", "bar-b", "bar", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.1.1", Cond: fixtures.Ready}) // no targetRef
	goneA := fixtures.Slice("ns1", "gone-a", "gone", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.2.1", Cond: fixtures.Ready})

	// Istio kinds: a WorkloadEntry the foo Service selects, relabelled; a health-checked entry
	// that turns healthy; a STATIC ServiceEntry edited, a newer one of its namespace for its
	// host (merged), and one of another namespace (the host shared, then not, then again); an
	// entry selecting the foo Pods and WorkloadEntries.
	vm1 := workloadEntry("vm-1", "10.0.3.1", map[string]string{"app": "foo"}, nil)
	vm1b := workloadEntry("vm-1", "10.0.3.1", map[string]string{"app": "foo", "version": "v2"}, nil)
	vm2sick := workloadEntry("vm-2", "10.0.3.2", map[string]string{"app": "bar"}, fixtures.Ptr(false))
	vm2well := workloadEntry("vm-2", "10.0.3.2", map[string]string{"app": "bar"}, fixtures.Ptr(true))
	ext := staticEntry("ext", "api.example.com", time.Unix(100, 0), "10.0.4.1")
	ext2 := staticEntry("ext", "api.example.com", time.Unix(100, 0), "10.0.4.1", "10.0.4.2")
	dup := staticEntry("dup", "api.example.com", time.Unix(200, 0), "10.0.4.9")
	elsewhere := staticEntry("elsewhere", "api.example.com", time.Unix(50, 0), "10.0.5.1")
	elsewhere.Namespace = "ns2"
	sel := staticEntry("sel", "sel.example.com", time.Unix(100, 0))
	sel.Spec.WorkloadSelector = &networking.WorkloadSelector{Labels: map[string]string{"app": "foo"}}

	return []history{
		{up(vm1), up(vm1b)},
		{up(vm2sick), up(vm2well)},
		{up(ext), up(ext2)},
		{up(dup)},
		{up(elsewhere), del(elsewhere), up(elsewhere)},
		{up(sel)},
		{up(ns1), up(ns1b)},
		{up(sys), up(sys2)},
		{up(n1), up(n1b)},
		{up(n2)},
		{up(foo), up(foo2)},
		{up(bar)},
		{up(gone), del(gone)},
		{up(foo1)},
		{up(foo2p), up(foo2relabel)},
		{up(foo3), del(foo3)},
		{up(bar1)},
		{up(fooA), up(fooA2)},
		{up(fooB)},
		{up(barA), up(barAFQDN)},
		{up(barB)},
		{up(goneA), del(goneA)},
	}
}

func workloadEntry(name, ip string, labels map[string]string, healthy *bool) *networkingclient.WorkloadEntry {
	we := &networkingclient.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns1"},
		Spec: networking.WorkloadEntry{Address: ip, Labels: labels, Ports: map[string]uint32{"http": 7070}}}
	if healthy != nil {
		we.Annotations = map[string]string{collections.AnnotationHealthChecksEnabled: "true"}
		status := "False"
		if *healthy {
			status = "True"
		}
		we.Status.Conditions = []*istioapimeta.IstioCondition{{Type: collections.ConditionHealthy, Status: status}}
	}
	return we
}

func staticEntry(name, host string, created time.Time, ips ...string) *networkingclient.ServiceEntry {
	se := &networkingclient.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns1", CreationTimestamp: metav1.NewTime(created)},
		Spec: networking.ServiceEntry{Hosts: []string{host}, Resolution: networking.ServiceEntry_STATIC,
			Ports: []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}}}}
	for _, ip := range ips {
		se.Spec.Endpoints = append(se.Spec.Endpoints, &networking.WorkloadEntry{Address: ip})
	}
	return se
}

func finalObjects(hs []history) []any {
	var out []any
	for _, h := range hs {
		if last := h[len(h)-1]; !last.del {
			out = append(out, last.obj)
		}
	}
	return out
}

func TestEventOrderNeverMatters(t *testing.T) {
	hs := orderScenario()
	truthGraph := rigs.NewGraph(t, finalObjects(hs)...)
	var truth endpointsState
	truthGraph.Await(t, "ground truth", func() (bool, string) {
		truth = stateOf(truthGraph.Graph)
		return len(truth.Services) == 5, fmt.Sprint(len(truth.Services))
	})
	// Sanity: the scenario exercises what it claims to.
	if e := truth.Services["ns1/bar"].Endpoints; len(e) != 2 || e[0].Slice != "bar-b" {
		t.Fatalf("FQDN replacement must leave only bar-b's endpoint (and vm-2's): %+v", e)
	}
	if _, ok := truth.Services["ns1/gone"]; ok {
		t.Fatal("deleted service present")
	}
	if e := truth.Services["ns1/api.example.com"].Endpoints; len(e) != 3 || e[1].Address != "10.0.4.2" || e[2].Address != "10.0.4.9" {
		t.Fatalf("ns1's entries of api.example.com must be merged, the older edited: %+v", e)
	}
	if e := truth.Services["ns2/api.example.com"].Endpoints; len(e) != 1 || e[0].Address != "10.0.5.1" {
		t.Fatalf("ns2's entry of api.example.com must be a service of its own: %+v", e)
	}
	if _, ok := truth.CLAs["ns2@outbound|80||api.example.com"]; !ok {
		t.Fatalf("the CLAs of a shared host must be keyed by namespace: %v", slices.Sorted(maps.Keys(truth.CLAs)))
	}
	if e := truth.Services["ns1/bar"].Endpoints; len(e) != 2 || e[1].Address != "10.0.3.2" || e[1].Port != 7070 {
		t.Fatalf("bar must select vm-2 once healthy: %+v", e)
	}
	if n := len(truth.Services["ns1/sel.example.com"].Endpoints); n != 3 {
		t.Fatalf("sel.example.com must select foo-1, foo-2 (ready) and vm-1: %d endpoints", n)
	}

	seed := uint64(time.Now().UnixNano())
	runs := 200
	if testing.Short() {
		runs = 20
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for run := 0; run < runs; run++ {
		runSeed := rng.Uint64()
		func() {
			stop := make(chan struct{})
			defer close(stop)
			g := rigs.NewGraphWith(t, rigs.GraphOptions{Stop: stop})
			// A waker of this run's own, on the collections the state is read from, closed with
			// the run.
			w := fixtures.WakeOn(t, fixtures.NewWaker(), g.ServiceEndpoints)
			fixtures.WakeOn(t, w, g.SliceEndpoints)
			defer w.Close()
			r := rand.New(rand.NewPCG(runSeed, 0))
			next := make([]int, len(hs))
			var trace []string
			for {
				var open []int
				for i, h := range hs {
					if next[i] < len(h) {
						open = append(open, i)
					}
				}
				if len(open) == 0 {
					break
				}
				i := open[r.IntN(len(open))]
				o := hs[i][next[i]]
				next[i]++
				g.In.Apply(o.obj, o.del)
				trace = append(trace, describeOp(o))
			}
			what := fmt.Sprintf("run %d (seed %d, run seed %d): the final state of the ground truth after order:\n  %s\n",
				run, seed, runSeed, strings.Join(trace, "\n  "))
			w.Await(t, rigs.Timeout, what, func() (bool, string) {
				diff := cmp.Diff(truth, stateOf(g.Graph))
				return diff == "", "(-truth +got):\n" + diff
			})
		}()
	}
}

func describeOp(o op) string {
	verb := "apply"
	if o.del {
		verb = "delete"
	}
	type named interface {
		GetName() string
		GetNamespace() string
	}
	n := o.obj.(named)
	return fmt.Sprintf("%s %T %s/%s", verb, o.obj, n.GetNamespace(), n.GetName())
}

func TestDescription(t *testing.T) {
	g := rigs.NewGraph(t,
		fixtures.Service("ns1", "foo", fixtures.HTTP...),
		fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", "n1"),
		fixtures.ZoneNode("n1", "r1", "z1"),
		fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready}),
	)
	expectAddrs(t, g, "ns1/foo", "10.0.0.1:8080/Healthy")
	s := g.Description.Snapshot()
	for _, n := range s.Nodes {
		if !n.Synced {
			t.Errorf("%s not synced", n.Name)
		}
	}
	se, _ := s.Node(graphs.NameServiceEndpoints)
	if se.Size != 1 || se.Recomputes == 0 || se.Input != graphs.NameServiceInfos {
		t.Fatalf("ServiceEndpoints node: %+v", se)
	}
	if n, _ := s.Node(graphs.NameSliceEndpoints); n.Input != collections.NameEndpointSlices || !slices.Contains(n.Dependencies, collections.NamePods) {
		t.Fatalf("SliceEndpoints node: %+v", n)
	}
	if n, _ := s.Node(graphs.NameProxyClasses); n.Input != graphs.NameProxiesByClass {
		t.Fatalf("ProxyClasses node: %+v", n)
	}
}
