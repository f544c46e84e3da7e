package serving

import (
	"slices"
	"testing"

	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// A rule ordering foo's endpoints by the proxy's version label.
const drVersionPriority = `
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: foo, namespace: ns1}
spec:
  host: foo
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 5}
    loadBalancer:
      localityLbSetting:
        failoverPriority: [version]
`

// TestFailoverPriorityOnTheProxysMetadataLabels: a proxy whose Pod the registry does not know
// keeps its node metadata LABELS (istiod's SetWorkloadLabels); failoverPriority [version] puts
// the endpoints of its version at priority 0 and the others at 1, and proxies of another
// version get their own CLA.
func TestFailoverPriorityOnTheProxysMetadataLabels(t *testing.T) {
	r := newRig(t, append(versionedMesh(), decode(t, drVersionPriority)...)...)
	get := func(ip, version string) []string {
		n := sidecar(ip, "ns1")
		n.Labels = map[string]string{"app": "client", "version": version}
		s := r.Open(n)
		_ = s.Request(adsclient.TypeCLA, fooCluster)
		return endpointsOf(onlyCLA(t, recv(t, s)))
	}
	if got, want := get("10.9.0.1", "v1"), []string{"10.0.0.1:8080 HEALTHY p0 r1/z1", "10.0.0.2:8080 HEALTHY p1 r1/z2", "10.0.0.3:8080 HEALTHY p1 r2/z3"}; !slices.Equal(got, want) {
		t.Fatalf("version v1: %v, want %v", got, want)
	}
	if got, want := get("10.9.0.2", "v2"), []string{"10.0.0.1:8080 HEALTHY p1 r1/z1", "10.0.0.2:8080 HEALTHY p0 r1/z2", "10.0.0.3:8080 HEALTHY p0 r2/z3"}; !slices.Equal(got, want) {
		t.Fatalf("version v2: %v, want %v", got, want)
	}
}
