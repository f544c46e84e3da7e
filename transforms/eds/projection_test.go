package eds

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/policy"
)

// TestCLAOfAClassEqualsCLAOfItsProjection: a CLA depends on a proxy only through the projection
// of its class, so that proxies with equal projections can share one CLA. For every traffic
// distribution, node-local or not, under every locality setting, the CLA built for a class is
// byte for byte the CLA built for its projection.
func TestCLAOfAClassEqualsCLAOfItsProjection(t *testing.T) {
	port := collections.ServicePort{Name: "http", Port: 80}
	var eps []collections.Endpoint
	for i, e := range lbtEndpoints {
		e.PortName, e.Port = "http", 8080
		if i%3 != 2 {
			// Every third endpoint has no version label.
			e.Meta = e.Meta.Edit(func(m *collections.EndpointMeta) {
				m.PodLabels = collections.InternLabels(map[string]string{"app": "foo", "version": fmt.Sprintf("v%d", i%3)})
			})
		}
		eps = append(eps, e)
	}
	var classes []collections.ProxyClass
	for _, c := range lbtProxies {
		for _, ns := range []string{"ns1", "ns2"} {
			for _, labels := range []map[string]string{nil, {"version": "v1"}, {"version": "v0", "app": "bar"},
				{"topology.istio.io/network": "own"}} {
				c.Namespace = ns
				c.Labels = collections.CanonicalLabels(labels)
				classes = append(classes, c)
			}
		}
	}
	for _, td := range []collections.TrafficDistribution{collections.TrafficDistributionAny,
		collections.TrafficDistributionPreferSameZone, collections.TrafficDistributionPreferSameNode} {
		for _, nodeLocal := range []bool{false, true} {
			svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local",
				TrafficDistribution: td, NodeLocal: nodeLocal, Ports: []collections.ServicePort{port}}
			policies := map[string]ClusterPolicy{"no rule": ClusterPolicyFor(svc, nil, "istio-system", policy.RuleProxy{Namespace: "ns1"}, 80, "")}
			settings := lbtSettings()
			on := true
			settings["label priority"] = struct {
				setting  *collections.LocalitySetting
				failover bool
			}{&collections.LocalitySetting{Enabled: &on, FailoverPriority: []string{"version", collections.LabelTopologyZone}}, true}
			settings["label value priority"] = struct {
				setting  *collections.LocalitySetting
				failover bool
			}{&collections.LocalitySetting{Enabled: &on, FailoverPriority: []string{collections.LabelTopologyNetwork, "version=v1", "app"}}, true}
			for name, s := range settings {
				cp := ClusterPolicy{Setting: s.setting, EnableFailover: s.failover}
				cp.LB = LocalityLBPolicy(s.setting, s.failover, nil, svc)
				policies[name] = cp
			}
			for pname, cp := range policies {
				for _, c := range classes {
					t.Run(fmt.Sprintf("%s/nodeLocal=%v/%s/%s", td, nodeLocal, pname, c.Key()), func(t *testing.T) {
						proj := Project(svc, cp, c)
						full := PlanCLA(fooName, svc, port, collections.AppendRefs(nil, eps), cp, c, nil).Encode()
						projected := PlanCLA(fooName, svc, port, collections.AppendRefs(nil, eps), cp, proj, nil).Encode()
						if !bytes.Equal(full, projected) {
							t.Fatalf("the CLA for class %q differs from the CLA for its projection %q", c.Key(), proj.Key())
						}
					})
				}
			}
		}
	}
}
