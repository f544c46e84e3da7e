package transforms

import (
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"github.com/krteds/krteds/collections"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// problemsOf lists the problems of a checked transform's result.
func problemsOf(p *collections.ObjectProblems) []collections.Problem {
	if p == nil {
		return nil
	}
	return p.Problems
}

// ep builds an endpoint on a node/locality with pod-like metadata.
func ep(ip string, h collections.HealthStatus, loc collections.Locality, node string, mut ...func(*collections.EndpointMeta)) collections.Endpoint {
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

var (
	r1z1 = collections.Locality{Region: "r1", Zone: "z1"}
	r1z2 = collections.Locality{Region: "r1", Zone: "z2"}
	r2z3 = collections.Locality{Region: "r2", Zone: "z3"}
	none = collections.Locality{}
)

// health maps address → health of the slice's endpoints.
func health(s *collections.SliceEndpoints) map[string]collections.HealthStatus {
	out := map[string]collections.HealthStatus{}
	if s == nil {
		return out
	}
	for _, e := range s.Endpoints {
		out[e.Address] = e.Health
	}
	return out
}

// with applies the fields a case expects on top of the skeleton.
func with(c *cluster.Cluster, f func(c *cluster.Cluster)) *cluster.Cluster { f(c); return c }

var drTestCreated = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func drTestMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(drTestCreated)}
}

const (
	unset      = collections.MTLSUnset
	disable    = collections.MTLSDisable
	permissive = collections.MTLSPermissive
	strict     = collections.MTLSStrict
)

// peer builds a converted PeerAuthentication created at second `created` (lower: older).
func peer(ns, name string, created int64, selector map[string]string, mode collections.MTLSMode, ports map[uint32]collections.MTLSMode) collections.PeerAuthentication {
	return collections.PeerAuthentication{Name: name, Namespace: ns, CreationTime: time.Unix(created, 0), Selector: selector, Mode: mode, PortModes: ports}
}
