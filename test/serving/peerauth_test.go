package serving

import (
	"slices"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

const (
	// nsPlaintext turns mTLS off for every workload of ns1.
	nsPlaintext = `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: ns1}
spec:
  mtls: {mode: DISABLE}
`
	// zoneStrict turns it back on for the workloads in zone z1 (foo-1), on their port 8080.
	zoneStrict = `
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: z1, namespace: ns1}
spec:
  selector: {matchLabels: {topology.kubernetes.io/zone: z1}}
  portLevelMtls: {8080: {mode: STRICT}}
`
)

// tlsModesOf renders the one CLA of a response as "ip=tlsMode" ("-" for none).
func tlsModesOf(t *testing.T, resp *discovery.DiscoveryResponse) []string {
	t.Helper()
	return fixtures.TLSModes(onlyCLA(t, resp))
}

// TestPeerAuthenticationDisablingMTLSReachesTheProxy: a proxy holding a CLA whose endpoints carry
// tlsMode istio is pushed the CLA without it when a PeerAuthentication disables mTLS for those
// workloads, and with it again where another turns it back on, as istiod's mtlsChecker decides
// (pilot/pkg/xds/endpoints/mtls_checker.go checkMtlsEnabled).
func TestPeerAuthenticationDisablingMTLSReachesTheProxy(t *testing.T) {
	objs := mesh()
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			p.Labels[collections.LabelTLSMode] = collections.TLSModeIstio // injected
		}
	}
	r := newRig(t, objs...)
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	if err := s.Request(adsclient.TypeCLA, fooCluster); err != nil {
		t.Fatal(err)
	}
	step := func(what string, want ...string) {
		t.Helper()
		resp := recv(t, s)
		if got := tlsModesOf(t, resp); !slices.Equal(got, want) {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
		if err := s.Ack(resp, fooCluster); err != nil {
			t.Fatal(err)
		}
	}
	step("no PeerAuthentication", "10.0.0.1=istio", "10.0.0.2=istio", "10.0.0.3=istio")

	r.In.Apply(decode(t, nsPlaintext)[0], false)
	step("ns1 DISABLE", "10.0.0.1=-", "10.0.0.2=-", "10.0.0.3=-")

	r.In.Apply(decode(t, zoneStrict)[0], false)
	step("z1's port 8080 STRICT", "10.0.0.1=istio", "10.0.0.2=-", "10.0.0.3=-")

	r.In.Apply(decode(t, nsPlaintext)[0], true)
	step("ns1 DISABLE deleted", "10.0.0.1=istio", "10.0.0.2=istio", "10.0.0.3=istio")
	expectNone(t, s)
}
