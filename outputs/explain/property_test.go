package explain_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
	securityapi "istio.io/api/security/v1beta1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/collections/sources"
	"github.com/krteds/krteds/examples"
	"github.com/krteds/krteds/outputs/explain"
	"github.com/krteds/krteds/outputs/source"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/policy"
)

// The property explain must hold: for every cluster, proxy and endpoint, its verdict is the CLA
// the proxy is served. An endpoint explained as sent is in the CLA, with the port, health,
// locality, priority, weight and tlsMode explained; one explained as not sent is not; and every
// endpoint of the CLA is explained as sent. On random meshes (services with traffic
// distribution, node-local traffic, persistent sessions; slices with every condition, duplicate
// copies, Pods not arrived, unknown ports, MCS and FQDN slices; DestinationRules with subsets,
// outlier detection, distribute and failover, TLS modes; PeerAuthentications) and on the bundled
// examples.

// served is what a CLA holds of one address.
type served struct {
	port             uint32
	health, locality string
	priority, weight uint32
	tlsMode          string
}

func servedCLA(t *testing.T, s *source.Source, v *collections.View, name string) (map[string]served, bool) {
	t.Helper()
	r, pending := s.Resolve(v, transforms.TypeCLA, name)
	if pending {
		return nil, false
	}
	out := map[string]served{}
	if r == nil {
		return out, true
	}
	cla := &endpoint.ClusterLoadAssignment{}
	if err := proto.Unmarshal(r.Body, cla); err != nil {
		t.Fatal(err)
	}
	for _, l := range cla.Endpoints {
		loc := collections.Locality{Region: l.GetLocality().GetRegion(), Zone: l.GetLocality().GetZone(), Subzone: l.GetLocality().GetSubZone()}
		for _, e := range l.LbEndpoints {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out[sa.GetAddress()] = served{port: sa.GetPortValue(), health: e.HealthStatus.String(), locality: loc.String(), priority: l.Priority,
				weight:  e.GetLoadBalancingWeight().GetValue(),
				tlsMode: e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue()}
		}
	}
	return out, true
}

// agrees reports where explain's verdicts differ from the CLA a proxy is served ("" when they
// agree, or when the CLA is still being computed: false).
func agrees(t *testing.T, s *source.Source, p *collections.Proxy, name string) (string, bool) {
	t.Helper()
	sv, ok := servedCLA(t, s, &p.View, name)
	if !ok {
		return "pending", false
	}
	ex, err := explain.Explain(s, p, name, "")
	if err != nil {
		return err.Error(), false
	}
	var diffs []string
	explained := map[string]bool{}
	for _, v := range ex.Endpoints {
		explained[v.Address] = true
		s, in := sv[v.Address]
		switch {
		case v.Sent && !in:
			diffs = append(diffs, fmt.Sprintf("%s explained as sent, not in the CLA", v.Address))
		case !v.Sent && in:
			diffs = append(diffs, fmt.Sprintf("%s explained as not sent (%s), in the CLA", v.Address, v.Reason))
		case v.Sent:
			got := served{port: v.Port, health: v.Health, locality: v.Locality, priority: v.Priority, weight: v.Weight, tlsMode: v.TLSMode}
			if got != s {
				diffs = append(diffs, fmt.Sprintf("%s explained as %+v, the CLA has %+v", v.Address, got, s))
			}
		}
	}
	for addr := range sv {
		if !explained[addr] {
			diffs = append(diffs, addr+" in the CLA, not explained")
		}
	}
	if len(diffs) > 0 {
		return fmt.Sprintf("proxy %s, cluster %s: %s", p.ID, name, strings.Join(diffs, "; ")), false
	}
	return "", true
}

// everyVerdictIsTheCLA waits until, for every connected proxy and every CLA set it sees, explain
// agrees with the CLA it is served.
func everyVerdictIsTheCLA(t *testing.T, g *rigs.Graph, conns []string, what string) int {
	t.Helper()
	checked := 0
	g.Await(t, what, func() (bool, string) {
		checked = 0
		for _, id := range conns {
			p := g.Proxies.GetKey(id)
			if p == nil {
				return false, "proxy " + id + " not computed"
			}
			for _, set := range g.CLAs.List() {
				if !policy.Visible(set.Visibility, p.View.Namespace, p.View.Egress) {
					continue
				}
				_, name := policy.SplitSetKey(set.Key)
				if diff, ok := agrees(t, g.Served, p, name); !ok {
					return false, diff
				}
				checked++
			}
		}
		return true, ""
	})
	return checked
}

// connect connects n proxies of random namespaces, nodes and localities.
func connect(t *testing.T, g *rigs.Graph, r *rand.Rand, namespaces, nodes []string, n int) []string {
	t.Helper()
	var conns []string
	for i := 0; i < n; i++ {
		ns := namespaces[r.IntN(len(namespaces))]
		md := collections.NodeMetadata{Namespace: ns, NodeName: nodes[r.IntN(len(nodes))]}
		loc := collections.Locality{Region: fmt.Sprintf("r%d", r.IntN(2)), Zone: fmt.Sprintf("z%d", r.IntN(2))}
		id := fmt.Sprintf("c%d", i)
		cp, err := collections.ParseProxy(id, fmt.Sprintf("sidecar~10.250.0.%d~p%d.%s~%s.svc.cluster.local", i+1, i, ns, ns), md, loc)
		if err != nil {
			t.Fatal(err)
		}
		g.Served.Connect(cp)
		conns = append(conns, id)
	}
	return conns
}

// TestExplainIsTheCLAOnRandomMeshes: the property, on random meshes.
func TestExplainIsTheCLAOnRandomMeshes(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("KRTEDS_EXPLAIN_SEED"), 10, 64); err == nil {
		seed = v
	}
	runs := 12
	if testing.Short() {
		runs = 3
	}
	t.Logf("seed %d (KRTEDS_EXPLAIN_SEED replays it)", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	total := 0
	for run := 0; run < runs; run++ {
		r := rand.New(rand.NewPCG(rng.Uint64(), 0))
		objs, nodes := randomMesh(r)
		g := rigs.NewGraph(t, objs...)
		conns := connect(t, g, r, []string{"ns1", "ns2"}, nodes, 4)
		total += everyVerdictIsTheCLA(t, g, conns, fmt.Sprintf("run %d: explain agrees with every CLA", run))
	}
	if total < 50 {
		t.Fatalf("only %d (proxy, cluster) pairs checked", total)
	}
}

// TestExplainIsTheCLAOnTheExamples: the property, on the bundled examples, each Pod a proxy.
func TestExplainIsTheCLAOnTheExamples(t *testing.T) {
	dir := t.TempDir()
	if err := examples.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	var objs []any
	files, _ := filepath.Glob(filepath.Join(dir, "mesh", "*.yaml"))
	var conns []collections.ConnectedProxy
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d, err := sources.Decode(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range d.Objects {
			objs = append(objs, o.Obj)
			if pod, ok := o.Obj.(*collections.Pod); ok && len(pod.IPs) > 0 {
				id := fmt.Sprintf("c%d", len(conns))
				cp, err := collections.ParseProxy(id, fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.cluster.local", pod.IPs[0], pod.Name(), pod.Namespace(), pod.Namespace()),
					collections.NodeMetadata{}, collections.Locality{})
				if err != nil {
					t.Fatal(err)
				}
				conns = append(conns, cp)
			}
		}
	}
	g := rigs.NewGraph(t, objs...)
	var ids []string
	for _, cp := range conns {
		g.Served.Connect(cp)
		ids = append(ids, cp.ConnID)
	}
	if n := everyVerdictIsTheCLA(t, g, ids, "explain agrees with every CLA of the examples"); n < 20 {
		t.Fatalf("only %d (proxy, cluster) pairs checked", n)
	}
}

// randomMesh is a mesh of two namespaces (and the root's policies), with the cases explain
// words; it returns its objects and node names.
func randomMesh(r *rand.Rand) ([]any, []string) {
	var objs []any
	pick := func(n int) bool { return r.IntN(n) == 0 }
	nodes := []string{"n0", "n1", "n2", "n3"}
	for i, n := range nodes {
		objs = append(objs, fixtures.ZoneNode(n, fmt.Sprintf("r%d", i/2), fmt.Sprintf("z%d", i%2)))
	}
	ip := 0
	for _, ns := range []string{"ns1", "ns2"} {
		objs = append(objs, fixtures.Namespace(ns, nil, nil))
		if pick(2) {
			modes := []securityapi.PeerAuthentication_MutualTLS_Mode{securityapi.PeerAuthentication_MutualTLS_STRICT,
				securityapi.PeerAuthentication_MutualTLS_DISABLE, securityapi.PeerAuthentication_MutualTLS_PERMISSIVE}
			objs = append(objs, &securityclient.PeerAuthentication{ObjectMeta: metav1.ObjectMeta{Name: "pa", Namespace: ns},
				Spec: securityapi.PeerAuthentication{Mtls: &securityapi.PeerAuthentication_MutualTLS{Mode: modes[r.IntN(3)]}}})
		}
		for s := 0; s < 2+r.IntN(3); s++ {
			name := fmt.Sprintf("svc%d", s)
			objs = append(objs, randomService(r, ns, name)...)
			var eps []fixtures.Endpoint
			for p := 0; p < r.IntN(6); p++ {
				ip++
				addr := fmt.Sprintf("10.%d.%d.%d", s, ip/200, ip%200+1)
				pod := fmt.Sprintf("%s-%d", name, p)
				if !pick(6) { // else the Pod has not arrived
					po := fixtures.Pod(ns, pod, name, addr, nodes[r.IntN(len(nodes))])
					po.Labels["version"] = []string{"v1", "v2"}[r.IntN(2)]
					if pick(2) {
						po.Labels[collections.LabelTLSMode] = collections.TLSModeIstio
					}
					objs = append(objs, po)
				}
				conds := []discovery.EndpointConditions{fixtures.Ready, fixtures.NotReady, fixtures.TerminatingServing,
					fixtures.Conditions(fixtures.Ptr(false), fixtures.Ptr(false), fixtures.Ptr(true))}
				eps = append(eps, fixtures.Endpoint{IP: addr, Pod: pod, Cond: conds[r.IntN(len(conds))]})
			}
			objs = append(objs, randomSlices(r, ns, name, eps)...)
		}
	}
	return objs, nodes
}

// randomService is a Service with one or two ports, maybe node-local, PreferClose or with a
// persistent session, and maybe a DestinationRule for it.
func randomService(r *rand.Rand, ns, name string) []any {
	pick := func(n int) bool { return r.IntN(n) == 0 }
	ports := []fixtures.Port{{Name: "http", Port: 80, Target: 8080}}
	if pick(2) {
		ports = append(ports, fixtures.Port{Name: "grpc", Port: 9090, Target: 9090})
	}
	svc := fixtures.Service(ns, name, ports...)
	switch r.IntN(5) {
	case 0:
		svc.Spec.InternalTrafficPolicy = fixtures.Ptr(corev1.ServiceInternalTrafficPolicyLocal)
	case 1:
		svc.Spec.TrafficDistribution = fixtures.Ptr(corev1.ServiceTrafficDistributionPreferClose)
	case 2:
		svc.Labels = map[string]string{"istio.io/persistent-session": "cookie"}
	}
	out := []any{svc}
	if pick(2) {
		tp := &networking.TrafficPolicy{}
		if pick(2) {
			tp.OutlierDetection = &networking.OutlierDetection{Interval: durationpb.New(time.Second), MinHealthPercent: int32(r.IntN(2) * 50)}
		}
		switch r.IntN(3) {
		case 0:
			tp.LoadBalancer = &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
				Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: "r0/*", To: map[string]uint32{"r0/z0/*": 80, "r1/*": 20}}}}}
		case 1:
			tp.LoadBalancer = &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
				Enabled: wrapperspb.Bool(true), Failover: []*networking.LocalityLoadBalancerSetting_Failover{{From: "r0", To: "r1"}}}}
		}
		if pick(2) {
			modes := []networking.ClientTLSSettings_TLSmode{networking.ClientTLSSettings_ISTIO_MUTUAL, networking.ClientTLSSettings_DISABLE}
			tp.Tls = &networking.ClientTLSSettings{Mode: modes[r.IntN(2)]}
		}
		out = append(out, &networkingclient.DestinationRule{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: networking.DestinationRule{Host: name + "." + ns + ".svc.cluster.local", TrafficPolicy: tp,
				Subsets: []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "v1"}}, {Name: "v2", Labels: map[string]string{"version": "v2"}}}}})
	}
	return out
}

// randomSlices spreads the endpoints over one or two slices, with copies in both, a port the
// Service does not have, and now and then an FQDN or a multi-cluster service's slice.
func randomSlices(r *rand.Rand, ns, name string, eps []fixtures.Endpoint) []any {
	ports := []fixtures.SlicePort{{Name: "http", Port: 8080}, {Name: "grpc", Port: 9090}}
	if r.IntN(4) == 0 {
		ports = append(ports, fixtures.SlicePort{Name: "unknown", Port: 7070})
	}
	a := fixtures.Slice(ns, name+"-a", name, ports)
	b := fixtures.Slice(ns, name+"-b", name, ports)
	for _, e := range eps {
		for _, s := range []*discovery.EndpointSlice{a, b} {
			if r.IntN(3) == 0 || s == a {
				one := fixtures.Slice(ns, "x", name, nil, e)
				s.Endpoints = append(s.Endpoints, one.Endpoints...)
			}
		}
	}
	out := []any{a, b}
	switch r.IntN(6) {
	case 0:
		f := fixtures.Slice(ns, name+"-fqdn", name, ports[:1], fixtures.Endpoint{IP: "db.example.com", Cond: fixtures.Ready})
		f.AddressType = discovery.AddressTypeFQDN
		out = append(out, f)
	case 1:
		m := fixtures.Slice(ns, name+"-mcs", name, ports[:1], fixtures.Endpoint{IP: "10.99.0.1", Cond: fixtures.Ready})
		m.Labels[collections.LabelMCSServiceName] = name
		out = append(out, m)
	}
	return out
}
