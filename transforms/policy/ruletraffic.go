package policy

import (
	"slices"

	"github.com/krteds/krteds/collections"
)

// EffectiveTrafficPolicy is the traffic policy of one cluster (port, subset) of a rule, merged
// as istiod's MergeSubsetTrafficPolicy: the rule's port-level policy for the port replaces the
// top-level one as a whole (fields it leaves unset are unset, not inherited); then the subset's
// policy (or, if it has one for the port, its port-level policy) overrides the fields it sets,
// and a subset port-level policy overrides all of them. subsetLabels are the subset's labels
// (nil when it has none); subsetFound is false when subset is not "" and the rule has no subset
// of that name (istiod then applies no label filter). The result may share pointers with dr.
func EffectiveTrafficPolicy(dr *collections.DestinationRule, port int32, subset string) (*collections.TrafficPolicy, map[string]string, bool) {
	if dr == nil {
		return nil, nil, subset == ""
	}
	policy := dr.Policy
	if pp, ok := dr.PortPolicies[uint32(port)]; ok && policy != nil {
		policy = pp
	}
	if subset == "" {
		return policy, nil, true
	}
	i := slices.IndexFunc(dr.Subsets, func(s collections.Subset) bool { return s.Name == subset })
	if i < 0 {
		return policy, nil, false
	}
	s := dr.Subsets[i]
	var labels map[string]string
	if len(s.Labels) > 0 {
		labels = s.Labels
	}
	sp, portLevel := s.Policy, false
	if pp, ok := s.PortPolicies[uint32(port)]; ok && sp != nil {
		sp, portLevel = pp, true
	}
	return mergeSubsetPolicy(policy, sp, portLevel), labels, true
}

// DestinationRuleTLSMode is the TLS mode a rule gives one cluster's endpoints, "" for none, as
// istiod's tlsModeForDestinationRule (pilot/pkg/xds/endpoints/mtls_checker.go): for the port's
// cluster, the top-level tls.mode overridden by a port-level one that sets tls; for a subset the
// rule defines, the subset's (top-level, then port-level) mode, else the rule's; for a subset the
// rule does not define, none — the rule's mode is not consulted, unlike its other fields.
func DestinationRuleTLSMode(dr *collections.DestinationRule, port int32, subset string) string {
	if dr == nil {
		return ""
	}
	if subset == "" {
		return tlsModeForPort(dr.Policy, dr.PortPolicies, port)
	}
	for _, s := range dr.Subsets {
		if s.Name != subset {
			continue
		}
		if mode := tlsModeForPort(s.Policy, s.PortPolicies, port); mode != "" {
			return mode
		}
		return tlsModeForPort(dr.Policy, dr.PortPolicies, port)
	}
	return ""
}

// tlsModeForPort is istiod's trafficPolicyTLSModeForPort: tls.mode, replaced by the port-level
// setting's when that sets tls (a port-level setting without tls keeps the top-level mode).
func tlsModeForPort(top *collections.TrafficPolicy, ports map[uint32]*collections.TrafficPolicy, port int32) string {
	if top == nil {
		return ""
	}
	mode := top.TLSMode
	if pp := ports[uint32(port)]; pp != nil && pp.TLSMode != "" {
		mode = pp.TLSMode
	}
	return mode
}

func mergeSubsetPolicy(orig, sub *collections.TrafficPolicy, portLevel bool) *collections.TrafficPolicy {
	if sub == nil {
		return orig
	}
	if orig == nil {
		return sub
	}
	m := *orig
	if sub.OutlierDetection || portLevel {
		m.OutlierDetection, m.MinHealthPercent, m.Outlier = sub.OutlierDetection, sub.MinHealthPercent, sub.Outlier
	}
	if sub.LoadBalancer || portLevel {
		m.LoadBalancer, m.Locality, m.Algorithm = sub.LoadBalancer, sub.Locality, sub.Algorithm
	}
	if sub.TLSMode != "" || portLevel {
		m.TLSMode = sub.TLSMode
	}
	return &m
}
