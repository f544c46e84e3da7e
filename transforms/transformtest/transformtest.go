// Package transformtest holds the fixtures the tests of more than one transforms package share:
// endpoints and localities, PeerAuthentications, rule metadata, the problems of a checked result.
package transformtest

import (
	"encoding/json"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/krteds/krteds/collections"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ProblemsOf lists the problems of a checked transform's result.
func ProblemsOf(p *collections.ObjectProblems) []collections.Problem {
	if p == nil {
		return nil
	}
	return p.Problems
}

// Ep builds an endpoint on a node/locality with pod-like metadata.
func Ep(ip string, h collections.HealthStatus, loc collections.Locality, node string, mut ...func(*collections.EndpointMeta)) collections.Endpoint {
	m := collections.NewEndpointMeta(
		collections.WorkloadMeta{
			PodLabels:     collections.InternLabels(map[string]string{"app": "foo"}),
			TLSMode:       "istio",
			Namespace:     "ns1",
			WorkloadName:  "foo",
			CanonicalName: "foo",
		},
		collections.TopologyMeta{
			ClusterID:     "Kubernetes",
			Locality:      loc,
			LocalityLabel: loc.String(),
			NodeName:      node,
		},
		"", "")
	for _, f := range mut {
		m = m.Edit(f)
	}
	return collections.Endpoint{Address: ip, Port: 8080, PortName: "http", Health: h, Slice: "s", Meta: m}
}

// Localities of the tests: two zones of region r1, one of r2, and none.
var (
	R1z1 = collections.Locality{Region: "r1", Zone: "z1"}
	R1z2 = collections.Locality{Region: "r1", Zone: "z2"}
	R2z3 = collections.Locality{Region: "r2", Zone: "z3"}
	None = collections.Locality{}
)

// Health maps address → health of the slice's endpoints.
func Health(s *collections.SliceEndpoints) map[string]collections.HealthStatus {
	out := map[string]collections.HealthStatus{}
	if s == nil {
		return out
	}
	for _, e := range s.Endpoints {
		out[e.Address] = e.Health
	}
	return out
}

// With applies the fields a case expects on top of the skeleton.
func With(c *cluster.Cluster, f func(c *cluster.Cluster)) *cluster.Cluster { f(c); return c }

// RuleCreated is when the rules RuleMeta names were created.
var RuleCreated = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// RuleMeta is the metadata of a rule ns/name created at RuleCreated.
func RuleMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(RuleCreated)}
}

// The PeerAuthentication modes, short.
const (
	Unset      = collections.MTLSUnset
	Disable    = collections.MTLSDisable
	Permissive = collections.MTLSPermissive
	Strict     = collections.MTLSStrict
)

// Peer builds a converted PeerAuthentication created at second `created` (lower: older).
func Peer(ns, name string, created int64, selector map[string]string, mode collections.MTLSMode, ports map[uint32]collections.MTLSMode) collections.PeerAuthentication {
	return collections.PeerAuthentication{Name: name, Namespace: ns, CreationTime: time.Unix(created, 0), Selector: selector, Mode: mode, PortModes: ports}
}

// SeedJSON adds the JSON encoding of each object to the fuzz corpus.
func SeedJSON(f *testing.F, objs ...any) {
	for _, o := range objs {
		b, err := json.Marshal(o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}
