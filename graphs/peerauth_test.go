package graphs_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	networking "istio.io/api/networking/v1"
	securityapi "istio.io/api/security/v1beta1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

var (
	peerAuthn   = fixtures.PeerAuthentication
	injectedPod = fixtures.InjectedPod
)

const (
	paDisable = fixtures.PeerDisable
	paStrict  = fixtures.PeerStrict
)

// tlsModes reads each endpoint's tlsMode metadata ("-" for none) from a cluster's shared CLA, or
// from the load assignment of a DNS cluster.
func tlsModes(g *graphs.Graph, name string) string {
	var la *endpoint.ClusterLoadAssignment
	if set := g.CLAs.GetKey(name); set != nil && set.Shared != nil {
		la = &endpoint.ClusterLoadAssignment{}
		if err := proto.Unmarshal(set.Shared.Body, la); err != nil {
			return err.Error()
		}
	} else if set := g.Clusters.GetKey(name); set != nil && set.Shared != nil {
		c := &cluster.Cluster{}
		if err := proto.Unmarshal(set.Shared.Body, c); err != nil {
			return err.Error()
		}
		la = c.LoadAssignment
	}
	if la == nil {
		return "no CLA"
	}
	out := fixtures.TLSModes(la)
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestPeerAuthenticationsDecideTLSMode: through the whole graph, PeerAuthentications decide the
// tlsMode metadata of the CLAs of Kubernetes Services and ServiceEntries, and of DNS clusters'
// load assignments (istiod's mtlsChecker serves both, FromServiceEndpoints and
// BuildClusterLoadAssignment going through EndpointBuilder.generate), as they are created,
// changed, deleted and re-created; an invalid one is reported and ignored without touching the
// others; a DestinationRule TLS mode overrides them.
func TestPeerAuthenticationsDecideTLSMode(t *testing.T) {
	stop := test.NewStop(t)
	vm := &networkingclient.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns1"},
		Spec: networking.ServiceEntry{Hosts: []string{"vm.example.com"}, Resolution: networking.ServiceEntry_STATIC,
			Ports:     []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
			Endpoints: []*networking.WorkloadEntry{{Address: "10.3.0.1", ServiceAccount: "vm", Labels: map[string]string{"app": "vm"}}}}}
	dns := &networkingclient.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "dns", Namespace: "ns1"},
		Spec: networking.ServiceEntry{Hosts: []string{"dns.example.com"}, Resolution: networking.ServiceEntry_DNS,
			Ports:     []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
			Endpoints: []*networking.WorkloadEntry{{Address: "backend.example.com", ServiceAccount: "vm", Labels: map[string]string{"app": "vm"}}}}}
	gr := rigs.NewGraphWith(t, rigs.GraphOptions{Stop: stop}, vm, dns,
		fixtures.Service("ns1", "foo", fixtures.HTTP...),
		injectedPod("ns1", "foo-1", "foo", "10.0.0.1", map[string]string{"version": "v1"}),
		injectedPod("ns1", "foo-2", "foo", "10.0.0.2", map[string]string{"version": "v2"}),
		fixtures.Pod("ns1", "foo-3", "foo", "10.0.0.3", "n1"), // no sidecar
		fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
			fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.Ready}, fixtures.Endpoint{IP: "10.0.0.3", Pod: "foo-3", Cond: fixtures.Ready}),
		fixtures.Service("ns2", "baz", fixtures.HTTP...),
		injectedPod("ns2", "baz-1", "baz", "10.0.1.1", nil),
		fixtures.Slice("ns2", "baz-a", "baz", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.1.1", Pod: "baz-1", Cond: fixtures.Ready}),
	)
	g, in := gr.Graph, gr.In
	w := fixtures.NewWaker()
	fixtures.WakeOn(t, w, g.CLAs)
	fixtures.WakeOn(t, w, g.Clusters)
	fixtures.WakeOn(t, w, g.Problems)
	const (
		foo = "outbound|80||foo.ns1.svc.cluster.local"
		baz = "outbound|80||baz.ns2.svc.cluster.local"
		vmc = "outbound|80||vm.example.com"
		dnc = "outbound|80||dns.example.com"
	)
	expect := func(what string, want map[string]string) {
		t.Helper()
		w.Await(t, 5*time.Second, what, func() (bool, string) {
			var diffs []string
			for _, name := range slices.Sorted(maps.Keys(want)) {
				if got := tlsModes(g, name); got != want[name] {
					diffs = append(diffs, fmt.Sprintf("%s: %q, want %q", name, got, want[name]))
				}
			}
			return len(diffs) == 0, strings.Join(diffs, "; ")
		})
	}
	problems := func() string {
		var out []string
		for _, op := range g.Problems.List() {
			for _, p := range op.Problems {
				if p.Kind == "PeerAuthentication" {
					out = append(out, p.Object+" "+p.Reason)
				}
			}
		}
		slices.Sort(out)
		return strings.Join(out, ",")
	}
	all := map[string]string{
		foo: "10.0.0.1=istio 10.0.0.2=istio 10.0.0.3=-", baz: "10.0.1.1=istio",
		vmc: "10.3.0.1=istio", dnc: "backend.example.com=istio",
	}
	expect("no PeerAuthentication: tlsMode istio for every injected workload", all)

	in.Apply(peerAuthn("ns1", "v1-plain", map[string]string{"version": "v1"}, paDisable, nil), false)
	all[foo] = "10.0.0.1=- 10.0.0.2=istio 10.0.0.3=-"
	expect("a workload policy disables foo v1", all)

	// Invalid: port-level modes without a selector. Were it applied, foo-2 would be disabled.
	invalid := peerAuthn("ns1", "ns-wide", nil, paDisable, map[uint32]securityapi.PeerAuthentication_MutualTLS_Mode{8080: paDisable})
	in.Apply(invalid, false)
	w.Await(t, 5*time.Second, "the invalid policy reported", func() (bool, string) {
		return problems() == "ns1/ns-wide invalid_peer_authentication", problems()
	})
	// Barrier: a later valid policy's effect shows the invalid one was processed before it.
	in.Apply(peerAuthn("ns2", "default", nil, paDisable, nil), false)
	all[baz] = "10.0.1.1=-"
	expect("the invalid policy ignored, the later valid one applied", all)

	// Fixed, it applies namespace-wide; the problem clears.
	fixed := peerAuthn("ns1", "ns-wide", nil, paDisable, nil)
	in.Apply(fixed, false)
	all[foo], all[vmc], all[dnc] = "10.0.0.1=- 10.0.0.2=- 10.0.0.3=-", "10.3.0.1=-", "backend.example.com=-"
	expect("the fixed policy disables ns1", all)
	w.Await(t, 5*time.Second, "the problem cleared", func() (bool, string) { return problems() == "", problems() })

	// A workload policy overrides it for the VM (ServiceEntry endpoints are selected by their labels).
	in.Apply(peerAuthn("ns1", "vm-strict", map[string]string{"app": "vm"}, paStrict, nil), false)
	all[vmc], all[dnc] = "10.3.0.1=istio", "backend.example.com=istio"
	expect("a workload policy re-enables the VM", all)

	in.Apply(fixed, true)
	all[foo] = "10.0.0.1=- 10.0.0.2=istio 10.0.0.3=-"
	expect("deleted: only the workload policy disables foo v1", all)
	in.Apply(fixed, false)
	all[foo] = "10.0.0.1=- 10.0.0.2=- 10.0.0.3=-"
	expect("re-created", all)

	// A DestinationRule's ISTIO_MUTUAL overrides every PeerAuthentication (tlsMode copied from
	// the workload, so the pod without a sidecar still has none).
	dr := &networkingclient.DestinationRule{ObjectMeta: metav1.ObjectMeta{Name: "foo", Namespace: "ns1"},
		Spec: networking.DestinationRule{Host: "foo", TrafficPolicy: &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}}}}
	// With a rule, the CLA is built per proxy class: a proxy of ns1 connects.
	gr.Served.Connect(collections.ConnectedProxy{ConnID: "c1", ID: "sidecar~10.0.9.1~client.ns1~ns1.svc.cluster.local", Type: "sidecar",
		IP: "10.0.9.1", PodName: "client", Namespace: "ns1"})
	in.Apply(dr, false)
	w.Await(t, 5*time.Second, "the rule's ISTIO_MUTUAL over the policies", func() (bool, string) {
		set := g.CLAs.GetKey(foo)
		if set == nil || len(set.ByClass) == 0 {
			return false, "no CLA for the proxy's class yet"
		}
		for k, r := range set.ByClass {
			if got := modesOf(r.Body); got != "10.0.0.1=istio 10.0.0.2=istio 10.0.0.3=-" {
				return false, k + ": " + got
			}
		}
		return true, ""
	})
}

// modesOf is tlsModes of one encoded CLA.
func modesOf(body []byte) string {
	la := &endpoint.ClusterLoadAssignment{}
	if err := proto.Unmarshal(body, la); err != nil {
		return err.Error()
	}
	out := fixtures.TLSModes(la)
	slices.Sort(out)
	return strings.Join(out, " ")
}

// TestPeerAuthnChangeRecomputesOnlyItsServices: istiod drops every cached EDS entry on any
// PeerAuthentication change (XdsCacheImpl.Clear) and pushes, in a partial push, the services of
// the changed policy's namespace, and every service for a policy of the root namespace
// (buildEndpoints, canSendPartialFullPushes). krteds recomputes the CLAs of the services with
// sidecar-injected endpoints in the policy's namespace, every such service for a policy of the
// root namespace, and no others: not those of other namespaces, nor of a namespace without
// injected workloads.
func TestPeerAuthnChangeRecomputesOnlyItsServices(t *testing.T) {
	stop := test.NewStop(t)
	var objs []any
	ip := 0
	addService := func(ns, name string, injected bool) {
		ip++
		addr := fmt.Sprintf("10.0.%d.%d", ip/250, ip%250+1)
		pod := fixtures.Pod(ns, name+"-1", name, addr, "n1")
		if injected {
			pod = injectedPod(ns, name+"-1", name, addr, nil)
		}
		objs = append(objs, fixtures.Service(ns, name, fixtures.HTTP...), pod,
			fixtures.Slice(ns, name+"-a", name, fixtures.HTTPSlice, fixtures.Endpoint{IP: addr, Pod: name + "-1", Cond: fixtures.Ready}))
	}
	for i := 0; i < 3; i++ {
		addService("ns1", fmt.Sprintf("a%d", i), true)
		addService("ns2", fmt.Sprintf("b%d", i), true)
		addService("plain", fmt.Sprintf("p%d", i), false) // no sidecars: no policy decides them
	}
	addService("barrier", "z", true)
	gr := rigs.NewGraphWith(t, rigs.GraphOptions{Stop: stop}, objs...)
	g, in := gr.Graph, gr.In
	changed := make(chan string, 100)
	// A service's CLA sets (its port's cluster, the unknown subsets') change in one batch: one
	// event per service and batch.
	reg := g.CLAs.RegisterBatch(func(evs []krt.Event[collections.ResourceSet]) {
		var services []string
		for _, e := range evs {
			if s := e.Latest().Service; !slices.Contains(services, s) {
				services = append(services, s)
			}
		}
		for _, s := range services {
			changed <- s
		}
	}, false)
	t.Cleanup(reg.UnregisterHandler)
	recomputes := func() uint64 {
		n, _ := g.Description.Snapshot().Node(graphs.NameCLAs)
		return n.Recomputes
	}
	// barrier flips the barrier namespace's policy, which changes the one CLA of barrier/z, and
	// waits for that change: every change applied before it has been processed by then.
	barrierMode := paDisable
	barrier := func() {
		t.Helper()
		in.Apply(peerAuthn("barrier", "default", nil, barrierMode, nil), false)
		barrierMode = map[securityapi.PeerAuthentication_MutualTLS_Mode]securityapi.PeerAuthentication_MutualTLS_Mode{paDisable: paStrict, paStrict: paDisable}[barrierMode]
		for {
			select {
			case s := <-changed:
				if s == "barrier/z" {
					return
				}
				t.Fatalf("the CLA of %s changed", s)
			case <-time.After(10 * time.Second):
				t.Fatal("the barrier's CLA never changed")
			}
		}
	}
	barrier()
	for _, step := range []struct {
		name string
		pa   *securityclient.PeerAuthentication
		del  bool
		// recomputed: how many services' CLAs are recomputed; changed: those whose CLA changes.
		recomputed int
		changed    []string
	}{
		{name: "namespace-wide STRICT in ns1: its three services, none changes", recomputed: 3,
			pa: peerAuthn("ns1", "default", nil, paStrict, nil)},
		{name: "namespace-wide DISABLE in ns1: its three services change", recomputed: 3, changed: []string{"ns1/a0", "ns1/a1", "ns1/a2"},
			pa: peerAuthn("ns1", "default", nil, paDisable, nil)},
		{name: "a policy of ns2 selecting b1: ns2's three, b1 changes", recomputed: 3, changed: []string{"ns2/b1"},
			pa: peerAuthn("ns2", "b1", map[string]string{"app": "b1"}, paDisable, nil)},
		{name: "a policy of ns2 selecting nothing: ns2's three, none changes", recomputed: 3,
			pa: peerAuthn("ns2", "nothing", map[string]string{"app": "none"}, paDisable, nil)},
		{name: "its selector moved to b2", recomputed: 3, changed: []string{"ns2/b2"},
			pa: peerAuthn("ns2", "nothing", map[string]string{"app": "b2"}, paDisable, nil)},
		{name: "deleted", recomputed: 3, changed: []string{"ns2/b2"}, del: true,
			pa: peerAuthn("ns2", "nothing", map[string]string{"app": "b2"}, paDisable, nil)},
		{name: "a namespace without sidecars: none", recomputed: 0,
			pa: peerAuthn("plain", "default", nil, paDisable, nil)},
		{name: "a namespace without services: none", recomputed: 0,
			pa: peerAuthn("empty", "default", nil, paDisable, nil)},
		// The root namespace's policies may be mesh-wide: every service with sidecars reads them.
		{name: "a root-namespace policy with a selector: every service with sidecars, none changes (istiod ignores it)", recomputed: 7,
			pa: peerAuthn("istio-system", "selecting", map[string]string{"app": "b0"}, paDisable, nil)},
		// ns1's and barrier's namespace-wide policies override it, and b1 is disabled already:
		// b0 and b2 change.
		{name: "mesh-wide DISABLE: every service with sidecars", recomputed: 7, changed: []string{"ns2/b0", "ns2/b2"},
			pa: peerAuthn("istio-system", "default", nil, paDisable, nil)},
	} {
		before := recomputes()
		in.Apply(step.pa, step.del)
		var got []string
		for range step.changed {
			select {
			case s := <-changed:
				got = append(got, s)
			case <-time.After(10 * time.Second):
				t.Fatalf("%s: changed %v, want %v", step.name, got, step.changed)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, step.changed) {
			t.Fatalf("%s: changed %v, want %v", step.name, got, step.changed)
		}
		// A policy of the root namespace recomputes the barrier's service too: were the barrier
		// applied before that recomputation ran, krt would do both in one.
		fixtures.PollingEvery(time.Millisecond, "a recomputation that changes nothing sends no event").
			Await(t, 10*time.Second, step.name+": the step's recomputations", func() (bool, string) {
				d := int(recomputes() - before)
				return d >= step.recomputed, fmt.Sprintf("%d CLA recomputations, want %d", d, step.recomputed)
			})
		barrier()
		// The barrier itself recomputes its one service.
		if d := int(recomputes()-before) - 1; d != step.recomputed {
			t.Fatalf("%s: %d CLA recomputations, want %d", step.name, d, step.recomputed)
		}
	}
}

// TestPeerAuthnEventOrderNeverMatters: the Services, Pods, slices and PeerAuthentications of a
// mesh (a mesh-wide DISABLE, a namespace STRICT over it, a workload port-level DISABLE, an invalid
// policy, a policy created and deleted again, a Pod relabelled into the workload policy's
// selector) applied in any order give the CLAs a graph built from the final objects gives.
func TestPeerAuthnEventOrderNeverMatters(t *testing.T) {
	slice := func(ns, svc string, pods ...string) any {
		var eps []fixtures.Endpoint
		for i, p := range pods {
			eps = append(eps, fixtures.Endpoint{IP: fmt.Sprintf("10.%d.0.%d", len(ns), i+1), Pod: p, Cond: fixtures.Ready})
		}
		return fixtures.Slice(ns, svc+"-a", svc, fixtures.HTTPSlice, eps...)
	}
	v1Before := injectedPod("ns1", "foo-1", "foo", "10.3.0.1", map[string]string{"version": "v0"})
	final := []any{
		fixtures.Service("ns1", "foo", fixtures.HTTP...), fixtures.Service("ns2", "baz", fixtures.HTTP...),
		injectedPod("ns1", "foo-1", "foo", "10.3.0.1", map[string]string{"version": "v1"}),
		injectedPod("ns1", "foo-2", "foo", "10.3.0.2", map[string]string{"version": "v2"}),
		injectedPod("ns2", "baz-1", "baz", "10.3.0.1", nil),
		slice("ns1", "foo", "foo-1", "foo-2"), slice("ns2", "baz", "baz-1"),
		peerAuthn("istio-system", "default", nil, paDisable, nil),
		peerAuthn("ns1", "default", nil, paStrict, nil),
		peerAuthn("ns1", "v1", map[string]string{"version": "v1"}, securityapi.PeerAuthentication_MutualTLS_UNSET,
			map[uint32]securityapi.PeerAuthentication_MutualTLS_Mode{8080: paDisable}),
		peerAuthn("ns2", "invalid", nil, paStrict, map[uint32]securityapi.PeerAuthentication_MutualTLS_Mode{8080: paStrict}),
	}
	transient := peerAuthn("ns2", "transient", nil, paStrict, nil)
	const foo, baz = "outbound|80||foo.ns1.svc.cluster.local", "outbound|80||baz.ns2.svc.cluster.local"
	truthGraph := rigs.NewGraph(t, final...).Graph
	truth := map[string]string{foo: tlsModes(truthGraph, foo), baz: tlsModes(truthGraph, baz)}
	if truth[foo] != "10.3.0.1=- 10.3.0.2=istio" || truth[baz] != "10.3.0.1=-" {
		t.Fatalf("the scenario does not exercise the rules: %v", truth)
	}
	seed := uint64(time.Now().UnixNano())
	runs := 40
	if testing.Short() {
		runs = 10
	}
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	for run := 0; run < runs; run++ {
		func() {
			gr := rigs.NewGraph(t)
			g, in := gr.Graph, gr.In
			w := fixtures.NewWaker()
			fixtures.WakeOn(t, w, g.CLAs)
			// Every object once, the relabelled Pod first as it was, the transient policy
			// created then deleted, each pair in order at random places.
			type op struct {
				obj any
				del bool
			}
			ops := make([]op, 0, len(final)+4)
			for _, o := range final {
				ops = append(ops, op{obj: o})
			}
			rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
			insertBefore := func(o op, target any) {
				at := slices.IndexFunc(ops, func(x op) bool { return x.obj == target })
				i := rng.IntN(at + 1)
				ops = slices.Insert(ops, i, o)
			}
			insertBefore(op{obj: v1Before}, final[2])
			ops = slices.Insert(ops, rng.IntN(len(ops)+1), op{obj: transient, del: true})
			insertBefore(op{obj: transient}, transient)
			for _, o := range ops {
				in.Apply(o.obj, o.del)
			}
			w.Await(t, 10*time.Second, fmt.Sprintf("run %d (seed %d): the final CLAs", run, seed), func() (bool, string) {
				got := map[string]string{foo: tlsModes(g, foo), baz: tlsModes(g, baz)}
				return maps.Equal(got, truth), fmt.Sprintf("got %v, want %v", got, truth)
			})
		}()
	}
}
