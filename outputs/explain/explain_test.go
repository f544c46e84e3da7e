package explain_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	networking "istio.io/api/networking/v1"
	securityapi "istio.io/api/security/v1beta1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/test"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/explain"
	"github.com/krteds/krteds/outputs/source"
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

// TestExplainReportsWhatTheSliceTransformLeftOut: an address that is not an IP and one whose Pod
// has not arrived are explained by the rule the slice transform recorded, and a valid one is
// sent.
func TestExplainReportsWhatTheSliceTransformLeftOut(t *testing.T) {
	slice := fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "not-an-ip", Cond: fixtures.Ready})
	g := rigs.NewGraph(t, fixtures.Service("ns1", "foo", fixtures.HTTP...), fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", ""), slice,
		fixtures.Pod("ns1", "client", "client", "10.9.0.1", ""))
	g.Served.Connect(collections.ConnectedProxy{ConnID: "c1", ID: "sidecar~10.9.0.1~client.ns1~ns1.svc.cluster.local", Type: "sidecar",
		IP: "10.9.0.1", PodName: "client", Namespace: "ns1"})
	var p *collections.Proxy
	g.Await(t, "the proxy", func() (bool, string) {
		p = g.Proxies.GetKey("c1")
		return p != nil, ""
	})
	cluster := "outbound|80||foo.ns1.svc.cluster.local"
	g.Await(t, "the CLA", func() (bool, string) { return g.CLAs.GetKey(cluster) != nil, "" })
	ex, err := explain.Explain(g.Served, p, cluster, "")
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	sent := map[string]bool{}
	for _, v := range ex.Endpoints {
		reasons[v.Address], sent[v.Address] = v.Reason, v.Sent
	}
	if !sent["10.0.0.1"] {
		t.Errorf("10.0.0.1 not sent: %q", reasons["10.0.0.1"])
	}
	if r := reasons["10.0.0.2"]; !strings.Contains(r, "targetRef Pod ns1/foo-2") || !strings.Contains(r, "withheld until it appears") {
		t.Errorf("10.0.0.2: %q, want the pending Pod", r)
	}
	if r := reasons["not-an-ip"]; !strings.Contains(r, "skipped as invalid") || !strings.Contains(r, collections.ReasonInvalidAddress) {
		t.Errorf("not-an-ip: %q, want the invalid address", r)
	}
}

// TestExplainSaysWhyAnEndpointHasTLSMode: explain reports the tlsMode metadata the CLA holds for
// each sent endpoint, and the rule that decided it: the workload's own tlsMode, the
// PeerAuthentication mode of its port and the policy that set it, or the DestinationRule's TLS mode.
func TestExplainSaysWhyAnEndpointHasTLSMode(t *testing.T) {
	stop := test.NewStop(t)
	slice := fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.3", Pod: "foo-3", Cond: fixtures.Ready})
	gr := rigs.NewGraphWith(t, rigs.GraphOptions{Stop: stop}, fixtures.Service("ns1", "foo", fixtures.HTTP...), slice,
		injectedPod("ns1", "foo-1", "foo", "10.0.0.1", map[string]string{"version": "v1"}),
		injectedPod("ns1", "foo-2", "foo", "10.0.0.2", map[string]string{"version": "v2"}),
		fixtures.Pod("ns1", "foo-3", "foo", "10.0.0.3", "n1"),
		peerAuthn("ns1", "v1", map[string]string{"version": "v1"}, paStrict, map[uint32]securityapi.PeerAuthentication_MutualTLS_Mode{8080: paDisable}),
		fixtures.Pod("ns1", "client", "client", "10.9.0.1", ""))
	g, s, in := gr.Graph, gr.Served, gr.In
	const cluster = "outbound|80||foo.ns1.svc.cluster.local"
	w, p := connectClient(t, s, cluster)
	check := func(want map[string][2]string) {
		t.Helper()
		ex, err := explain.Explain(s, p, cluster, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range ex.Endpoints {
			wv, ok := want[v.Address]
			if !ok || !v.Sent {
				t.Fatalf("%s: sent=%t %q", v.Address, v.Sent, v.Reason)
			}
			var fact string
			for _, f := range v.Facts {
				if strings.Contains(f, "tlsMode") {
					fact = f
				}
			}
			if v.TLSMode != wv[0] || !strings.Contains(fact, wv[1]) || strings.Contains(fact, "but the CLA has it") {
				t.Errorf("%s: tlsMode %q, fact %q; want %q and a fact with %q", v.Address, v.TLSMode, fact, wv[0], wv[1])
			}
		}
	}
	check(map[string][2]string{
		"10.0.0.1": {"", "no tlsMode metadata (clients send plaintext): its tlsMode is \"istio\", no DestinationRule sets a tls mode, and the PeerAuthentication mode of ns1 port 8080 is DISABLE from PeerAuthentication ns1/v1 (portLevelMtls of port 8080)"},
		"10.0.0.2": {"istio", "tlsMode istio (clients send mTLS): its tlsMode is \"istio\", no DestinationRule sets a tls mode, and the PeerAuthentication mode of ns1 port 8080 is PERMISSIVE, the default"},
		"10.0.0.3": {"", "its tlsMode is \"disabled\""},
	})
	in.Apply(&networkingclient.DestinationRule{ObjectMeta: metav1.ObjectMeta{Name: "foo", Namespace: "ns1"},
		Spec: networking.DestinationRule{Host: "foo", TrafficPolicy: &networking.TrafficPolicy{Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL}}}}, false)
	w.Await(t, 5*time.Second, "the rule's CLA", func() (bool, string) {
		set := g.CLAs.GetKey(cluster)
		return set != nil && len(set.ByClass) > 0, ""
	})
	check(map[string][2]string{
		"10.0.0.1": {"istio", "the DestinationRule ns1/foo sets tls mode ISTIO_MUTUAL"},
		"10.0.0.2": {"istio", "the DestinationRule ns1/foo sets tls mode ISTIO_MUTUAL"},
		"10.0.0.3": {"", "the DestinationRule ns1/foo sets tls mode ISTIO_MUTUAL for the cluster, and its tlsMode is \"disabled\""},
	})
}

// connectClient connects the proxy of the Pod ns1/client (10.9.0.1) and waits for it and the
// CLA of cluster; the waker wakes on the proxies and the CLAs.
func connectClient(t *testing.T, s *source.Source, cluster string) (*fixtures.Waker, *collections.Proxy) {
	t.Helper()
	g := s.Graph()
	w := fixtures.NewWaker()
	fixtures.WakeOn(t, w, g.Proxies)
	fixtures.WakeOn(t, w, g.CLAs)
	s.Connect(collections.ConnectedProxy{ConnID: "c1", ID: "sidecar~10.9.0.1~client.ns1~ns1.svc.cluster.local", Type: "sidecar",
		IP: "10.9.0.1", PodName: "client", Namespace: "ns1"})
	var p *collections.Proxy
	w.Await(t, 5*time.Second, "the proxy and the CLA", func() (bool, string) {
		p = g.Proxies.GetKey("c1")
		return p != nil && g.CLAs.GetKey(cluster) != nil, ""
	})
	return w, p
}

// TestExplainShowsTheHashKey: with krteds.io/endpoint-hash-key on the Service, explain gives
// each sent endpoint's hash_key as the CLA holds it, and why; changing the annotation changes it.
func TestExplainShowsTheHashKey(t *testing.T) {
	stop := test.NewStop(t)
	slice := fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.Ready})
	svc := fixtures.Service("ns1", "foo", fixtures.HTTP...)
	svc.Annotations = map[string]string{collections.AnnotationEndpointHashKey: collections.HashKeyPodName}
	keyed := fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", "n1")
	keyed.Annotations = map[string]string{"example.com/shard": "shard-7"}
	gr := rigs.NewGraphWith(t, rigs.GraphOptions{Stop: stop}, svc, slice, keyed,
		fixtures.Pod("ns1", "foo-2", "foo", "10.0.0.2", "n1"), fixtures.Pod("ns1", "client", "client", "10.9.0.1", ""))
	s, in := gr.Served, gr.In
	const cluster = "outbound|80||foo.ns1.svc.cluster.local"
	w, p := connectClient(t, s, cluster)
	keysOf := func() map[string]string {
		ex, err := explain.Explain(s, p, cluster, "")
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, v := range ex.Endpoints {
			for _, f := range v.Facts {
				if strings.Contains(f, "hash_key") {
					out[v.Address] = v.HashKey + " | " + f
				}
			}
		}
		return out
	}
	keys := keysOf()
	if k := keys["10.0.0.1"]; !strings.HasPrefix(k, "foo-1 | ") || !strings.Contains(k, "its Pod's name") {
		t.Errorf("10.0.0.1: %q, want foo-1 and its Pod's name", k)
	}
	if k := keys["10.0.0.2"]; !strings.HasPrefix(k, "foo-2 | ") {
		t.Errorf("10.0.0.2: %q, want foo-2", k)
	}

	svc = svc.DeepCopy()
	svc.Annotations[collections.AnnotationEndpointHashKey] = "example.com/shard"
	in.Apply(svc, false)
	w.Await(t, 5*time.Second, "the annotation's keys", func() (bool, string) {
		keys = keysOf()
		return strings.HasPrefix(keys["10.0.0.1"], "shard-7 | "), fmt.Sprint(keys)
	})
	if k := keys["10.0.0.2"]; !strings.HasPrefix(k, " | no hash_key") || !strings.Contains(k, "does not have") {
		t.Errorf("10.0.0.2: %q, want no key: its Pod lacks the annotation", k)
	}
}
