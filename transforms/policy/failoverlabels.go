package policy

import (
	"slices"
	"strings"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// FailoverLabelNames gathers the labels whose proxy values some failoverPriority may compare
// (FailoverPriority): the names in the failoverPriority entries of every DestinationRule (top
// level, port level, subsets; locality and zone-aware settings) that are not "label=value"
// entries, and the topology labels trafficDistribution's priorities read. Proxy classes keep
// the proxy's values of these labels only. Every DestinationRule change re-runs it; the proxies
// are recomputed only when the set of names changes.
func FailoverLabelNames(rules krt.Collection[collections.DestinationRule]) (krt.TransformationEmpty[collections.FailoverLabels], []any) {
	return func(ctx krt.HandlerContext) *collections.FailoverLabels {
		names := slices.Clone(PreferSameNodeLabels)
		for _, r := range krt.Fetch(ctx, rules) {
			names = appendPolicyFailoverLabels(names, r.Policy, r.PortPolicies)
			for _, s := range r.Subsets {
				names = appendPolicyFailoverLabels(names, s.Policy, s.PortPolicies)
			}
		}
		slices.Sort(names)
		return &collections.FailoverLabels{Names: slices.Clip(slices.Compact(names))}
	}, []any{rules}
}

func appendPolicyFailoverLabels(names []string, top *collections.TrafficPolicy, ports map[uint32]*collections.TrafficPolicy) []string {
	names = appendFailoverLabels(names, top)
	for _, p := range ports {
		names = appendFailoverLabels(names, p)
	}
	return names
}

func appendFailoverLabels(names []string, tp *collections.TrafficPolicy) []string {
	if tp == nil || tp.Locality == nil {
		return names
	}
	for _, entry := range tp.Locality.FailoverPriority {
		if name, ok := ProxyLabelOf(entry); ok {
			names = append(names, name)
		}
	}
	return names
}

// ProxyLabelOf is the proxy label a failoverPriority entry compares: none for "label=value"
// (the value is compared instead), else what precedes the first "=" (FailoverPriority).
func ProxyLabelOf(entry string) (string, bool) {
	parts := strings.Split(entry, "=")
	if len(parts) == 2 {
		return "", false
	}
	return parts[0], true
}

// Failover priority labels used for trafficDistribution, as istiod's GetEffectiveLbSetting.
var (
	PreferSameZoneLabels = []string{collections.LabelTopologyNetwork, collections.LabelTopologyRegion, collections.LabelTopologyZone}
	PreferSameNodeLabels = []string{collections.LabelTopologyNetwork, collections.LabelTopologyRegion, collections.LabelTopologyZone,
		collections.LabelTopologySubzone, collections.LabelHostname}
)
