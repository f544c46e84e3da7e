package policy

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	securityapi "istio.io/api/security/v1beta1"
	typeapi "istio.io/api/type/v1beta1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/transformtest"
)

// peerWorkload is the metadata of a sidecar-injected workload of ns with these pod labels, in
// r1/z1 on node n1.
func peerWorkload(ns string, labels map[string]string) *collections.EndpointMeta {
	return collections.NewEndpointMeta(
		collections.WorkloadMeta{PodLabels: collections.InternLabels(labels), TLSMode: collections.TLSModeIstio, Namespace: ns, WorkloadName: "w"},
		collections.TopologyMeta{Locality: transformtest.R1z1, LocalityLabel: transformtest.R1z1.String(), ClusterID: "Kubernetes", NodeName: "n1"}, "", "")
}

// TestPeerAuthnModeFor holds the mode PeerAuthentications give a workload port to istiod's
// resolution: AuthenticationPolicies.addPeerAuthentication (one namespace- or mesh-wide policy per
// namespace, the oldest), getConfigsForWorkload (the workload's namespace and the root namespace;
// a selector must be a subset of the endpoint's labels), ComposePeerAuthentication (mesh →
// namespace → workload, UNSET inheriting, the oldest of a level winning, a root-namespace policy
// with a selector ignored, portLevelMtls of the workload policy replacing its mode, an UNSET
// entry inheriting it) and policyApplier.GetMutualTLSModeForPort (keyed by ep.EndpointPort, the
// target port). All in pilot/pkg/model/authentication.go and pilot/pkg/security/authn.
func TestPeerAuthnModeFor(t *testing.T) {
	app := map[string]string{"app": "foo"}
	other := map[string]string{"app": "bar"}
	cases := []struct {
		name     string
		policies []collections.PeerAuthentication
		ns       string
		labels   map[string]string
		port     uint32
		want     collections.MTLSMode
		// from is the deciding policy's "<ns>/<name>" ("" for the default); scope its scope.
		from  string
		scope PeerScope
	}{
		{name: "no policy: PERMISSIVE", want: transformtest.Permissive},
		{name: "mesh-wide STRICT", policies: []collections.PeerAuthentication{transformtest.Peer("istio-system", "m", 1, nil, transformtest.Strict, nil)},
			want: transformtest.Strict, from: "istio-system/m", scope: ScopeMesh},
		{name: "mesh-wide PERMISSIVE", policies: []collections.PeerAuthentication{transformtest.Peer("istio-system", "m", 1, nil, transformtest.Permissive, nil)},
			want: transformtest.Permissive, from: "istio-system/m", scope: ScopeMesh},
		{name: "mesh-wide DISABLE", policies: []collections.PeerAuthentication{transformtest.Peer("istio-system", "m", 1, nil, transformtest.Disable, nil)},
			want: transformtest.Disable, from: "istio-system/m", scope: ScopeMesh},
		{name: "mesh-wide UNSET: PERMISSIVE", policies: []collections.PeerAuthentication{transformtest.Peer("istio-system", "m", 1, nil, transformtest.Unset, nil)},
			want: transformtest.Permissive},
		{name: "namespace-wide overrides mesh-wide", policies: []collections.PeerAuthentication{
			transformtest.Peer("istio-system", "m", 1, nil, transformtest.Strict, nil), transformtest.Peer("ns1", "n", 2, nil, transformtest.Disable, nil)},
			want: transformtest.Disable, from: "ns1/n", scope: ScopeNamespace},
		{name: "namespace-wide PERMISSIVE over mesh-wide DISABLE", policies: []collections.PeerAuthentication{
			transformtest.Peer("istio-system", "m", 1, nil, transformtest.Disable, nil), transformtest.Peer("ns1", "n", 2, nil, transformtest.Permissive, nil)},
			want: transformtest.Permissive, from: "ns1/n", scope: ScopeNamespace},
		{name: "namespace-wide UNSET inherits mesh-wide", policies: []collections.PeerAuthentication{
			transformtest.Peer("istio-system", "m", 1, nil, transformtest.Disable, nil), transformtest.Peer("ns1", "n", 2, nil, transformtest.Unset, nil)},
			want: transformtest.Disable, from: "istio-system/m", scope: ScopeMesh},
		{name: "workload policy overrides namespace-wide", policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "n", 1, nil, transformtest.Strict, nil), transformtest.Peer("ns1", "w", 2, app, transformtest.Disable, nil)},
			want: transformtest.Disable, from: "ns1/w", scope: ScopeWorkload},
		{name: "a workload policy selecting other workloads does not apply", policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "n", 1, nil, transformtest.Strict, nil), transformtest.Peer("ns1", "w", 2, other, transformtest.Disable, nil)},
			want: transformtest.Strict, from: "ns1/n", scope: ScopeNamespace},
		{name: "a selector needs every label", policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "w", 2, map[string]string{"app": "foo", "version": "v1"}, transformtest.Disable, nil)},
			want: transformtest.Permissive},
		{name: "the selector matches the augmented topology labels", policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "w", 2, map[string]string{collections.LabelTopologyZone: "z1", collections.LabelHostname: "n1"}, transformtest.Disable, nil)},
			want: transformtest.Disable, from: "ns1/w", scope: ScopeWorkload},
		{name: "workload UNSET inherits namespace-wide", policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "n", 1, nil, transformtest.Disable, nil), transformtest.Peer("ns1", "w", 2, app, transformtest.Unset, nil)},
			want: transformtest.Disable, from: "ns1/n", scope: ScopeNamespace},
		{name: "workload UNSET inherits mesh-wide through an UNSET namespace-wide", policies: []collections.PeerAuthentication{
			transformtest.Peer("istio-system", "m", 1, nil, transformtest.Strict, nil), transformtest.Peer("ns1", "n", 1, nil, transformtest.Unset, nil), transformtest.Peer("ns1", "w", 2, app, transformtest.Unset, nil)},
			want: transformtest.Strict, from: "istio-system/m", scope: ScopeMesh},
		{name: "portLevelMtls on the target port", port: 8080, policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "w", 2, app, transformtest.Strict, map[uint32]collections.MTLSMode{8080: transformtest.Disable})},
			want: transformtest.Disable, from: "ns1/w", scope: ScopePort},
		{name: "portLevelMtls of another port: the workload mode", port: 9090, policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "w", 2, app, transformtest.Strict, map[uint32]collections.MTLSMode{8080: transformtest.Disable})},
			want: transformtest.Strict, from: "ns1/w", scope: ScopeWorkload},
		{name: "portLevelMtls STRICT over a workload DISABLE", port: 8080, policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "w", 2, app, transformtest.Disable, map[uint32]collections.MTLSMode{8080: transformtest.Strict})},
			want: transformtest.Strict, from: "ns1/w", scope: ScopePort},
		{name: "portLevelMtls UNSET inherits the workload's (itself inherited) mode", port: 8080, policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "n", 1, nil, transformtest.Disable, nil), transformtest.Peer("ns1", "w", 2, app, transformtest.Unset, map[uint32]collections.MTLSMode{8080: transformtest.Unset})},
			want: transformtest.Disable, from: "ns1/n", scope: ScopeNamespace},
		{name: "several namespace-wide: the oldest", policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "young", 5, nil, transformtest.Strict, nil), transformtest.Peer("ns1", "old", 2, nil, transformtest.Disable, nil), transformtest.Peer("ns1", "mid", 3, nil, transformtest.Permissive, nil)},
			want: transformtest.Disable, from: "ns1/old", scope: ScopeNamespace},
		{name: "several namespace-wide of one age: the lowest name", policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "b", 2, nil, transformtest.Strict, nil), transformtest.Peer("ns1", "a", 2, nil, transformtest.Disable, nil)},
			want: transformtest.Disable, from: "ns1/a", scope: ScopeNamespace},
		{name: "an UNSET oldest namespace-wide hides a younger one", policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "old", 1, nil, transformtest.Unset, nil), transformtest.Peer("ns1", "young", 2, nil, transformtest.Disable, nil)},
			want: transformtest.Permissive},
		{name: "several mesh-wide: the oldest", policies: []collections.PeerAuthentication{
			transformtest.Peer("istio-system", "young", 5, nil, transformtest.Strict, nil), transformtest.Peer("istio-system", "old", 2, nil, transformtest.Disable, nil)},
			want: transformtest.Disable, from: "istio-system/old", scope: ScopeMesh},
		{name: "several selecting workload policies: the oldest, its ports only", port: 8080, policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "young", 5, app, transformtest.Strict, map[uint32]collections.MTLSMode{8080: transformtest.Disable}),
			transformtest.Peer("ns1", "old", 2, map[string]string{"app": "foo"}, transformtest.Permissive, nil)},
			want: transformtest.Permissive, from: "ns1/old", scope: ScopeWorkload},
		{name: "several selecting workload policies of one age: the lowest name", policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "b", 2, app, transformtest.Strict, nil), transformtest.Peer("ns1", "a", 2, app, transformtest.Disable, nil)},
			want: transformtest.Disable, from: "ns1/a", scope: ScopeWorkload},
		{name: "the oldest workload policy selecting it, not the oldest of the namespace", policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "oldest", 1, other, transformtest.Strict, nil), transformtest.Peer("ns1", "mine", 2, app, transformtest.Disable, nil)},
			want: transformtest.Disable, from: "ns1/mine", scope: ScopeWorkload},
		{name: "a policy of another namespace does not apply", policies: []collections.PeerAuthentication{
			transformtest.Peer("ns2", "n", 1, nil, transformtest.Disable, nil), transformtest.Peer("ns2", "w", 1, app, transformtest.Disable, nil)},
			want: transformtest.Permissive},
		{name: "a policy without selector outside the root namespace is namespace-wide, not mesh-wide", ns: "ns2", policies: []collections.PeerAuthentication{
			transformtest.Peer("ns1", "n", 1, nil, transformtest.Disable, nil)},
			want: transformtest.Permissive},
		{name: "a root-namespace policy with a selector is ignored", policies: []collections.PeerAuthentication{
			transformtest.Peer("istio-system", "m", 1, nil, transformtest.Strict, nil), transformtest.Peer("istio-system", "w", 1, app, transformtest.Disable, nil)},
			want: transformtest.Strict, from: "istio-system/m", scope: ScopeMesh},
		{name: "a workload of the root namespace: mesh-wide only", ns: "istio-system", policies: []collections.PeerAuthentication{
			transformtest.Peer("istio-system", "m", 2, nil, transformtest.Disable, nil), transformtest.Peer("istio-system", "w", 1, app, transformtest.Strict, nil), transformtest.Peer("ns1", "n", 1, nil, transformtest.Strict, nil)},
			want: transformtest.Disable, from: "istio-system/m", scope: ScopeMesh},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns, labels, port := tc.ns, tc.labels, tc.port
			if ns == "" {
				ns = "ns1"
			}
			if labels == nil {
				labels = app
			}
			if port == 0 {
				port = 8080
			}
			// The order the policies arrive in never matters.
			for _, order := range [][]collections.PeerAuthentication{tc.policies, reversed(tc.policies)} {
				p := NewPeerAuthn("istio-system", order)
				got := p.ModeFor(ns, peerWorkload(ns, labels).Label, port)
				from := ""
				if got.Policy != nil {
					from = got.Policy.ResourceName()
				}
				if got.Mode != tc.want || from != tc.from || got.Scope != tc.scope {
					t.Fatalf("got %s (%q, scope %d), want %s (%q, scope %d)", got.Mode, from, got.Scope, tc.want, tc.from, tc.scope)
				}
				if tc.scope == ScopePort && got.Port != port {
					t.Fatalf("port %d, want %d", got.Port, port)
				}
			}
		})
	}
	// Without any policy (a nil PeerAuthn) nothing is disabled.
	var none *PeerAuthn
	if m := none.ModeFor("ns1", peerWorkload("ns1", app).Label, 80); m.Mode != transformtest.Permissive || m.Policy != nil {
		t.Fatalf("nil PeerAuthn: %+v", m)
	}
}

func reversed[T any](s []T) []T {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}

// TestConvertPeerAuthentication: the selector and modes are copied (an empty selector is none);
// what istiod's ValidatePeerAuthentication rejects, and a mode outside the CRD's enum, is
// reported as invalid_peer_authentication and ignored whole.
func TestConvertPeerAuthentication(t *testing.T) {
	created := metav1.NewTime(time.Unix(100, 0))
	obj := func(spec *securityapi.PeerAuthentication) *securityclient.PeerAuthentication {
		o := &securityclient.PeerAuthentication{ObjectMeta: metav1.ObjectMeta{Name: "pa", Namespace: "ns1", CreationTimestamp: created}}
		proto.Merge(&o.Spec, spec)
		return o
	}
	mtls := func(m securityapi.PeerAuthentication_MutualTLS_Mode) *securityapi.PeerAuthentication_MutualTLS {
		return &securityapi.PeerAuthentication_MutualTLS{Mode: m}
	}
	sel := func(l map[string]string) *typeapi.WorkloadSelector { return &typeapi.WorkloadSelector{MatchLabels: l} }
	cases := []struct {
		name string
		spec *securityapi.PeerAuthentication
		want *collections.PeerAuthentication
		// invalid: a word the problem's detail holds.
		invalid string
	}{
		{name: "empty: namespace-wide, UNSET", spec: &securityapi.PeerAuthentication{},
			want: &collections.PeerAuthentication{Name: "pa", Namespace: "ns1", CreationTime: created.Time}},
		{name: "empty selector: namespace-wide", spec: &securityapi.PeerAuthentication{Selector: sel(map[string]string{}), Mtls: mtls(securityapi.PeerAuthentication_MutualTLS_STRICT)},
			want: &collections.PeerAuthentication{Name: "pa", Namespace: "ns1", CreationTime: created.Time, Mode: transformtest.Strict}},
		{name: "workload with ports", spec: &securityapi.PeerAuthentication{Selector: sel(map[string]string{"app": "foo"}),
			Mtls: mtls(securityapi.PeerAuthentication_MutualTLS_PERMISSIVE),
			PortLevelMtls: map[uint32]*securityapi.PeerAuthentication_MutualTLS{
				8080: mtls(securityapi.PeerAuthentication_MutualTLS_DISABLE), 9090: nil, 9091: mtls(securityapi.PeerAuthentication_MutualTLS_UNSET)}},
			want: &collections.PeerAuthentication{Name: "pa", Namespace: "ns1", CreationTime: created.Time, Selector: map[string]string{"app": "foo"},
				Mode: transformtest.Permissive, PortModes: map[uint32]collections.MTLSMode{8080: transformtest.Disable, 9090: transformtest.Unset, 9091: transformtest.Unset}}},
		{name: "portLevelMtls without selector", spec: &securityapi.PeerAuthentication{
			PortLevelMtls: map[uint32]*securityapi.PeerAuthentication_MutualTLS{8080: mtls(securityapi.PeerAuthentication_MutualTLS_DISABLE)}},
			invalid: "port level mTLS"},
		{name: "port 0", spec: &securityapi.PeerAuthentication{Selector: sel(map[string]string{"app": "foo"}),
			PortLevelMtls: map[uint32]*securityapi.PeerAuthentication_MutualTLS{0: mtls(securityapi.PeerAuthentication_MutualTLS_DISABLE)}},
			invalid: "1..65535"},
		{name: "port over 65535", spec: &securityapi.PeerAuthentication{Selector: sel(map[string]string{"app": "foo"}),
			PortLevelMtls: map[uint32]*securityapi.PeerAuthentication_MutualTLS{70000: mtls(securityapi.PeerAuthentication_MutualTLS_DISABLE)}},
			invalid: "1..65535"},
		{name: "wildcard selector", spec: &securityapi.PeerAuthentication{Selector: sel(map[string]string{"app": "*"})}, invalid: "wildcard"},
		{name: "empty selector key", spec: &securityapi.PeerAuthentication{Selector: sel(map[string]string{"": "x"})}, invalid: "empty key"},
		{name: "a mode outside the enum", spec: &securityapi.PeerAuthentication{Mtls: mtls(7)}, invalid: "mode 7"},
		{name: "a port mode outside the enum", spec: &securityapi.PeerAuthentication{Selector: sel(map[string]string{"app": "foo"}),
			PortLevelMtls: map[uint32]*securityapi.PeerAuthentication_MutualTLS{8080: mtls(9)}}, invalid: "portLevelMtls[8080]: mode 9"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pr, got := ConvertPeerAuthentication(obj(tc.spec))
			if tc.invalid != "" {
				ps := transformtest.ProblemsOf(pr)
				if got != nil || len(ps) != 1 || ps[0].Reason != collections.ReasonInvalidPeerAuthentication ||
					ps[0].Kind != KindPeerAuthentication || ps[0].Object != "ns1/pa" || !strings.Contains(ps[0].Detail, tc.invalid) {
					t.Fatalf("got %+v, problems %+v; want none and one %s containing %q", got, ps, collections.ReasonInvalidPeerAuthentication, tc.invalid)
				}
				return
			}
			if pr != nil {
				t.Fatalf("problems %+v", pr.Problems)
			}
			if got == nil || !got.Equals(*tc.want) || (got.Selector == nil) != (tc.want.Selector == nil) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if pr, got := ConvertPeerAuthentication(nil); pr != nil || got != nil {
		t.Fatal("a nil object converts to nothing")
	}
}

// TestPeerAuthnFetch: the transform reads, by namespace, only the policies that may decide its
// endpoints: none without an endpoint of tlsMode istio; else those of the root namespace and of
// the namespaces of such endpoints (resolved: the root namespace's with a selector are ignored).
func TestPeerAuthnFetch(t *testing.T) {
	stop := test.NewStop(t)
	all := []collections.PeerAuthentication{
		transformtest.Peer("istio-system", "mesh", 1, nil, transformtest.Strict, nil),
		transformtest.Peer("istio-system", "root-selecting", 1, map[string]string{"app": "foo"}, transformtest.Disable, nil),
		transformtest.Peer("ns1", "ns", 1, nil, transformtest.Strict, nil),
		transformtest.Peer("ns1", "foo", 1, map[string]string{"app": "foo"}, transformtest.Disable, nil),
		transformtest.Peer("ns1", "bar", 1, map[string]string{"app": "bar"}, transformtest.Disable, nil),
		transformtest.Peer("ns2", "ns", 1, nil, transformtest.Disable, nil),
	}
	policies := krt.NewStaticCollection(nil, all, krt.WithStop(stop))
	in := PeerAuthnInputs{RootNamespace: "istio-system", ByNamespace: krt.NewIndex(policies, "byNamespace", PeerAuthnNamespace).AsCollection()}
	injected := transformtest.Ep("10.1.0.1", collections.Healthy, transformtest.R1z1, "n1")
	plain := transformtest.Ep("10.1.0.2", collections.Healthy, transformtest.R1z1, "n1", func(m *collections.EndpointMeta) { m.TLSMode = "disabled" })
	injectedIn := func(ns string) collections.Endpoint {
		return transformtest.Ep("10.1.0.3", collections.Healthy, transformtest.R1z1, "n1", func(m *collections.EndpointMeta) { m.Namespace = ns })
	}
	gateway := collections.Endpoint{Address: "2.2.2.2", Port: 15443, Meta: collections.NewEndpointMeta(collections.WorkloadMeta{TLSMode: "istio"}, collections.TopologyMeta{}, "", "")}
	read := func(p *PeerAuthn) []string {
		if p == nil {
			return nil
		}
		var out []string
		if p.mesh != nil {
			out = append(out, p.mesh.ResourceName())
		}
		for _, ns := range slices.Sorted(maps.Keys(p.namespaces)) {
			if w := p.namespaces[ns].wide; w != nil {
				out = append(out, w.ResourceName())
			}
			for _, w := range p.namespaces[ns].workloads {
				out = append(out, w.ResourceName())
			}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		eps  []collections.Endpoint
		want []string
	}{
		{name: "no endpoint", want: nil},
		{name: "no endpoint with tlsMode istio", eps: []collections.Endpoint{plain, gateway}, want: nil},
		{name: "an injected endpoint of ns1", eps: []collections.Endpoint{plain, injected}, want: []string{"istio-system/mesh", "ns1/ns", "ns1/bar", "ns1/foo"}},
		{name: "an injected endpoint of the root namespace", eps: []collections.Endpoint{injectedIn("istio-system")}, want: []string{"istio-system/mesh"}},
		{name: "injected endpoints of ns1 and ns2", eps: []collections.Endpoint{injected, injectedIn("ns2")},
			want: []string{"istio-system/mesh", "ns1/ns", "ns1/bar", "ns1/foo", "ns2/ns"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := read(in.Fetch(krt.TestingDummyContext{}, collections.AppendRefs(nil, tc.eps))); !slices.Equal(got, tc.want) {
				t.Fatalf("read %v, want %v", got, tc.want)
			}
		})
	}
	// Without the policies' collection, nothing is read.
	if p := (PeerAuthnInputs{}).Fetch(krt.TestingDummyContext{}, collections.AppendRefs(nil, []collections.Endpoint{injected})); p != nil {
		t.Fatal("no collection, yet policies")
	}
}
