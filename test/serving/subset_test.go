package serving

import (
	"fmt"
	"slices"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// A rule with subset v1 and a TLS mode: the port's cluster has no tlsMode metadata (SIMPLE);
// for a subset the rule does not define, istiod consults no TLS mode of the rule
// (tlsModeForDestinationRule), so injected endpoints carry tlsMode: istio there.
const drSimpleTLS = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: foo, namespace: ns1}
spec:
  host: foo
  trafficPolicy:
    tls: {mode: SIMPLE}
  subsets:
  - name: v1
    labels: {version: v1}
`

// injectedMesh is the mesh with foo's pods labelled tlsMode istio.
func injectedMesh() []any {
	objs := mesh()
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			p.Labels["security.istio.io/tlsMode"] = "istio"
		}
	}
	return objs
}

func tlsModes(cla *endpoint.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			out = append(out, e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue())
		}
	}
	return out
}

// TestUnknownSubsetGetsThePortsEndpoints: a CLA asked for a subset no DestinationRule defines is
// what istiod's BuildClusterLoadAssignment sends (a missing rule or subset means no label
// filter): every endpoint of the port, named for the cluster asked for, updated as the
// endpoints change. Asking for any number of such names keeps no state in the graph.
func TestUnknownSubsetGetsThePortsEndpoints(t *testing.T) {
	r := newRig(t, append(injectedMesh(), decode(t, drSimpleTLS)...)...)
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	unknown := "outbound|80|nosuch|foo.ns1.svc.cluster.local"
	all := []string{"10.0.0.1:8080 HEALTHY p0 r1/z1", "10.0.0.2:8080 HEALTHY p0 r1/z2", "10.0.0.3:8080 HEALTHY p0 r2/z3"}

	_ = s.Request(adsclient.TypeCLA, fooCluster)
	resp := recv(t, s)
	base := onlyCLA(t, resp)
	if got := tlsModes(base); !slices.Equal(got, []string{"", "", ""}) {
		t.Fatalf("the port's cluster under tls SIMPLE: tlsMode %q, want none", got)
	}
	_ = s.Ack(resp, fooCluster)

	_ = s.Request(adsclient.TypeCLA, fooCluster, unknown)
	var cla *endpoint.ClusterLoadAssignment
	for cla == nil {
		resp = recv(t, s)
		clas, err := adsclient.CLAs(resp)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range clas {
			if c.ClusterName == unknown {
				cla = c
			}
		}
		_ = s.Ack(resp, fooCluster, unknown)
	}
	if got := endpointsOf(cla); !slices.Equal(got, all) {
		t.Fatalf("unknown subset: %v, want %v", got, all)
	}
	if got := tlsModes(cla); !slices.Equal(got, []string{"istio", "istio", "istio"}) {
		t.Fatalf("unknown subset: tlsMode %q, want istio (the rule's TLS mode does not apply)", got)
	}
	expectNone(t, s)

	// The endpoints change: the unknown subset's CLA follows.
	r.In.Apply(fooSlice(fixtures.Ready, fixtures.NotReady, fixtures.Ready), false)
	want := []string{"10.0.0.1:8080 HEALTHY p0 r1/z1", "10.0.0.2:8080 UNHEALTHY p0 r1/z2", "10.0.0.3:8080 HEALTHY p0 r2/z3"}
	for got := []string(nil); !slices.Equal(got, want); {
		resp = recv(t, s)
		clas, err := adsclient.CLAs(resp)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range clas {
			if c.ClusterName == unknown {
				got = endpointsOf(c)
			}
		}
		_ = s.Ack(resp, fooCluster, unknown)
	}

	// A subset the rule defines still selects; an unknown service still gets an empty CLA.
	for name, want := range map[string]int{
		"outbound|80|v1|foo.ns1.svc.cluster.local":     0,
		"outbound|80|nosuch|bar.ns1.svc.cluster.local": 0,
		"outbound|81|nosuch|foo.ns1.svc.cluster.local": 0,
	} {
		o := r.Open(sidecar("10.9.0.2", "ns1"))
		_ = o.Request(adsclient.TypeCLA, name)
		c := onlyCLA(t, recv(t, o))
		if c.ClusterName != name || len(endpointsOf(c)) != want {
			t.Fatalf("%s: cluster %q with %d endpoints, want %d", name, c.ClusterName, len(endpointsOf(c)), want)
		}
	}

	// Any number of made-up subset names: the graph holds no more CLA sets.
	sets := len(r.CLAs.List())
	names := []string{fooCluster}
	for i := range 200 {
		names = append(names, fmt.Sprintf("outbound|80|made-up-%d|foo.ns1.svc.cluster.local", i))
	}
	_ = s.Request(adsclient.TypeCLA, names...)
	resp = recv(t, s)
	clas, _ := adsclient.CLAs(resp)
	for _, c := range clas {
		if c.ClusterName != fooCluster && len(endpointsOf(c)) != 3 {
			t.Fatalf("%s: %v", c.ClusterName, endpointsOf(c))
		}
	}
	if len(clas) < len(names)-1 {
		t.Fatalf("%d CLAs for %d new names", len(clas), len(names)-1)
	}
	_ = s.Ack(resp, names...)
	if n := len(r.CLAs.List()); n != sets {
		t.Fatalf("asking for made-up subsets changed the CLA sets from %d to %d", sets, n)
	}
}

// TestUnknownSubsetWithoutARule: with no DestinationRule at all, any subset is unknown.
func TestUnknownSubsetWithoutARule(t *testing.T) {
	r := newRig(t, mesh()...)
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	name := "outbound|80|v9|foo.ns1.svc.cluster.local"
	_ = s.Request(adsclient.TypeCLA, name)
	cla := onlyCLA(t, recv(t, s))
	if cla.ClusterName != name || len(endpointsOf(cla)) != 3 {
		t.Fatalf("cluster %q with %v, want %s with the 3 endpoints", cla.ClusterName, endpointsOf(cla), name)
	}
}
