package eds

import (
	"strings"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/policy"
	"github.com/krteds/krteds/transforms/registry"
)

// LBPolicy is the effective load-balancing policy of one cluster: what istiod derives from the
// DestinationRule, the Service's trafficDistribution and the mesh defaults.
type LBPolicy struct {
	// FailoverPriority lists labels (optionally "label=value") whose agreement with the proxy
	// orders endpoints into priorities; applied only when Failover is on.
	FailoverPriority []string
	// Failover turns priority failover on (istiod: DR outlierDetection, or forced by
	// trafficDistribution).
	Failover bool
	// SupportsUnhealthy sends UNHEALTHY endpoints (istiod default true).
	SupportsUnhealthy bool
	// Networks (nil in a single-network mesh) routes endpoints of other networks through their
	// gateways.
	Networks *NetworkFilter
}

// PolicyFor resolves the load-balancing policy of a service's clusters. Without a
// DestinationRule, only trafficDistribution changes anything: the mesh default
// localityLbSetting {enabled: true} applies no priorities without outlier detection.
func PolicyFor(svc *collections.ServiceInfo) LBPolicy {
	p := LBPolicy{SupportsUnhealthy: true}
	switch svc.TrafficDistribution {
	case collections.TrafficDistributionPreferSameZone:
		p.FailoverPriority, p.Failover = policy.PreferSameZoneLabels, true
	case collections.TrafficDistributionPreferSameNode:
		p.FailoverPriority, p.Failover = policy.PreferSameNodeLabels, true
	}
	return p
}

// ClassLabels are the proxy labels a class implies: the proxy's own labels it keeps, augmented
// with the topology labels of its locality, network and node, and its cluster (as the proxy's
// effective labels are).
func ClassLabels(c collections.ProxyClass) map[string]string {
	return registry.AugmentLabels(collections.ParseCanonicalLabels(c.Labels), c.ClusterID, c.Locality, c.NodeName, c.Network)
}

// project keeps only the class dimensions that the CLAs of svc under lb depend on, so that
// proxies that differ only elsewhere share one CLA. The projection of a class is itself a class.
func project(svc *collections.ServiceInfo, lb LBPolicy, c collections.ProxyClass) collections.ProxyClass {
	var out collections.ProxyClass
	if svc.NodeLocal {
		out.NodeName = c.NodeName
	}
	if lb.Networks != nil && lb.Networks.Crosses {
		out.Network = c.Network
	}
	if svc.NodeLocal || svc.ClusterLocal {
		// Other clusters' shards are left out (node names are per cluster).
		out.ClusterID = c.ClusterID
	}
	if lb.Failover && len(lb.FailoverPriority) > 0 {
		// Only the labels the priorities read matter: the proxy's own ones it keeps, and the
		// topology labels derived from these dimensions.
		labels := ClassLabels(c)
		own := collections.ParseCanonicalLabels(c.Labels)
		needs := map[string]bool{}
		var kept map[string]string
		for _, l := range lb.FailoverPriority {
			name, _, _ := strings.Cut(l, "=")
			needs[name] = true
			// The proxy's own value of each label an entry compares with the proxy's (of a
			// topology label too: a network label of the proxy's own wins over its network).
			if n, ok := policy.ProxyLabelOf(l); ok {
				if v, in := own[n]; in {
					if kept == nil {
						kept = map[string]string{}
					}
					kept[n] = v
				}
			}
		}
		out.Labels = collections.CanonicalLabels(kept)
		if needs[collections.LabelTopologyNetwork] {
			out.Network = labels[collections.LabelTopologyNetwork]
		}
		if needs[collections.LabelTopologyRegion] {
			out.Locality.Region = c.Locality.Region
		}
		if needs[collections.LabelTopologyZone] {
			out.Locality.Zone = c.Locality.Zone
		}
		if needs[collections.LabelTopologySubzone] {
			out.Locality.Subzone = c.Locality.Subzone
		}
		if needs[collections.LabelHostname] {
			out.NodeName = c.NodeName
		}
		if needs[collections.LabelTopologyCluster] {
			out.ClusterID = c.ClusterID
		}
	}
	return out
}
