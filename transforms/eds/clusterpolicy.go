package eds

import (
	"strconv"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/policy"
)

// ClusterPolicy is everything that decides one cluster's CLA beyond the endpoints: the
// effective DestinationRule for the proxy's namespace and what it sets for the port and subset.
type ClusterPolicy struct {
	LB LBPolicy
	// Setting and EnableFailover drive the locality load balancing applied after the priorities
	// of LB (distribute weights, region failover, zone-aware buckets).
	Setting        *collections.LocalitySetting
	EnableFailover bool
	// SubsetLabels select the endpoints of a subset cluster (nil: all endpoints, which is what
	// istiod sends for a subset it does not know).
	SubsetLabels map[string]string
	// EndpointTLS decides which endpoints carry the tlsMode metadata: its Mode is the TLS mode
	// the rule sets, if any; its Peer, the PeerAuthentications of the service's endpoints, is the
	// same for every cluster of a service.
	policy.EndpointTLS
	// Rule is "<ns>/<name>" of the effective rule, "" without one.
	Rule string
}

// PostProcess reports whether the CLA needs the message-level locality functions (anything
// beyond failover priorities).
func (cp ClusterPolicy) PostProcess() bool {
	s := cp.Setting
	if s == nil || !s.IsEnabled() {
		return false
	}
	return s.ZoneAware || len(s.Distribute) > 0 || (cp.EnableFailover && len(s.Failover) > 0) ||
		(cp.EnableFailover && len(s.FailoverPriority) == 0)
}

// ClusterPolicyFor resolves the policy of one cluster for a proxy (its namespace and the rules
// with a workloadSelector that select it).
func ClusterPolicyFor(svc *collections.ServiceInfo, sp *collections.ServicePolicy, rootNamespace string, proxy policy.RuleProxy, port int32, subset string) ClusterPolicy {
	var dr *collections.DestinationRule
	if sp != nil && len(sp.Rules) > 0 {
		dr = policy.ResolveDestinationRule(sp.Rules, proxy, svc, rootNamespace)
	}
	if dr == nil {
		cp := ClusterPolicy{LB: PolicyFor(svc)}
		cp.Setting, cp.EnableFailover = LBSettingFor(DefaultMeshLocalitySetting(), nil, svc)
		return cp
	}
	tp, labels, _ := policy.EffectiveTrafficPolicy(dr, port, subset)
	cp := ClusterPolicy{Rule: dr.ResourceName(), SubsetLabels: labels, EndpointTLS: policy.EndpointTLS{Mode: policy.TLSMetadataFor(policy.DestinationRuleTLSMode(dr, port, subset))}}
	cp.Setting, cp.EnableFailover = LBSettingFor(DefaultMeshLocalitySetting(), tp, svc)
	cp.LB = LocalityLBPolicy(cp.Setting, cp.EnableFailover, tp, svc)
	return cp
}

// Project keeps the class dimensions the cluster's CLA depends on.
func Project(svc *collections.ServiceInfo, cp ClusterPolicy, c collections.ProxyClass) collections.ProxyClass {
	p := project(svc, cp.LB, c)
	if cp.PostProcess() {
		loc := ProxyLocalityDependence(cp.Setting, cp.EnableFailover, c.Locality)
		if loc.Region != "" {
			p.Locality.Region = loc.Region
		}
		if loc.Zone != "" {
			p.Locality.Zone = loc.Zone
		}
		if loc.Subzone != "" {
			p.Locality.Subzone = loc.Subzone
		}
	}
	return p
}

// DependsOnNamespace reports whether the CLA may differ between proxy namespaces: some
// DestinationRule may apply to the service.
func DependsOnNamespace(sp *collections.ServicePolicy) bool { return sp != nil && len(sp.Rules) > 0 }

// CLAKey is the key of one CLA: the cluster name, the effective rule, the TLS metadata rule
// (a rule's cluster of an unknown subset differs from its port's cluster only by it), the
// projected class. The PeerAuthentications are not in it: they are the same for every CLA of a
// service.
func CLAKey(clusterName string, cp ClusterPolicy, projected collections.ProxyClass) string {
	k := clusterClassKey(clusterName, projected)
	if cp.Rule != "" {
		k += "~dr:" + cp.Rule
	}
	if cp.Mode != policy.TLSByEndpoint {
		k += "~tls:" + strconv.Itoa(int(cp.Mode))
	}
	return k
}
