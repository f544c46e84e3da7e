// Package eds derives the ClusterLoadAssignments: per cluster and proxy class, a plan of the
// endpoints sent (health, subsets, networks, failover priorities, locality load balancing, mTLS
// metadata) that Encode renders as the bytes proto.Marshal would give, and the LEDS collections
// of large clusters.
package eds

import (
	"math"
	"slices"
	"strings"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/policy"
)

// CLAPlan is a ClusterLoadAssignment before encoding: which endpoints, grouped by locality and
// priority, in order.
type CLAPlan struct {
	ClusterName string
	Groups      []CLAGroup
	// TLS decides which endpoints carry the tlsMode metadata.
	TLS policy.EndpointTLS
	// HashKey is the service's endpoint hash key setting (ServiceInfo.HashKey): which endpoints
	// carry an envoy.lb hash_key, and what it is (HashKeyOf).
	HashKey string
}

// HashKeyOf is an endpoint's ring-hash key (gRFC A76, envoy.lb hash_key) under a service's
// setting: its Pod's name for HashKeyPodName, else the value of the Pod annotation the setting
// names; "" (no key: clients place the endpoint by its address) without a setting, a Pod or
// the annotation.
func HashKeyOf(setting string, ep *collections.Endpoint) string {
	switch {
	case setting == "":
		return ""
	case setting == collections.HashKeyPodName:
		if ep.Pod == "" {
			return ""
		}
		return ep.Pod[strings.IndexByte(ep.Pod, '/')+1:]
	case ep.Meta == nil:
		return ""
	}
	return ep.Meta.Annotations.Value(setting)
}

// CLAGroup is one LocalityLbEndpoints.
type CLAGroup struct {
	Locality collections.Locality
	Priority uint32
	// Endpoints point into the endpoints the plan was made from (or, for a network gateway,
	// at an endpoint of the plan's own); none may be changed.
	Endpoints []*collections.Endpoint
	// Weight, when set, is the locality's weight (distribute gives it); else it is the sum of
	// its endpoints' weights.
	Weight uint32
}

// weight is the group's locality weight: Weight, else the sum of its endpoints' weights (1 each
// unless a WorkloadEntry sets one), saturating.
func (g CLAGroup) weight() uint64 {
	if g.Weight != 0 {
		return uint64(g.Weight)
	}
	var weight uint64
	for _, ep := range g.Endpoints {
		weight += uint64(ep.Meta.LBWeight())
	}
	return min(weight, math.MaxUint32)
}

// Exclusion is the rule by which PlanCLA leaves an endpoint out of a CLA (Kept: none).
type Exclusion uint8

const (
	Kept Exclusion = iota
	// ExcludedPort: the endpoint is of another port name than the cluster's service port.
	ExcludedPort
	// ExcludedNode: a node-local service (internalTrafficPolicy Local), endpoint on another node.
	ExcludedNode
	// ExcludedCluster: a node- or cluster-local service, endpoint in another cluster.
	ExcludedCluster
	// ExcludedTerminating: terminating endpoints are never sent.
	ExcludedTerminating
	// ExcludedUnhealthy: unhealthy endpoints are sent only when the policy supports it.
	ExcludedUnhealthy
	// ExcludedDraining: draining endpoints are sent only for persistent-session services.
	ExcludedDraining
	// ExcludedSubset: the endpoint's labels do not match the subset's.
	ExcludedSubset
	// ExcludedNetwork: on another network than the proxy's, with gateways, and without mTLS: the
	// split horizon cannot carry it.
	ExcludedNetwork
	// ExcludedThroughGateway: on another network than the proxy's: the gateways of its network
	// are sent instead (Trace.Via).
	ExcludedThroughGateway
	// ExcludedDistribute: a localityLbSetting distribute rule gives its locality no weight.
	ExcludedDistribute
	// ExcludedDrainingLabel: its labels give DrainingLabel a value, and the service is no
	// persistent-session one.
	ExcludedDrainingLabel
)

// DrainingLabel is istiod's PILOT_DRAINING_LABEL (its default): an endpoint whose labels (its
// Pod's, or its WorkloadEntry's) give it a non-empty value is draining, whatever its slice says.
const DrainingLabel = "istio.io/draining"

// DrainingByLabel reports whether an endpoint's labels say it is draining.
func DrainingByLabel(e *collections.Endpoint) bool {
	if e.Meta == nil {
		return false
	}
	v, _ := e.Meta.Label(DrainingLabel)
	return v != ""
}

// SentHealth is the health an endpoint is sent with: DRAINING for one whose labels say it is
// draining (istiod's buildEnvoyLbEndpoint forces it, over UNHEALTHY too), else its own.
func SentHealth(e *collections.Endpoint) collections.HealthStatus {
	if DrainingByLabel(e) {
		return collections.Draining
	}
	return e.Health
}

// exclude is planCLA's rule for one endpoint: which rule, if any, leaves it out of the CLA of
// the service port for the (projected) proxy class. krteds explain reports the same rule.
func exclude(svc *collections.ServiceInfo, port collections.ServicePort, lb LBPolicy, class collections.ProxyClass, e collections.Endpoint) Exclusion {
	switch {
	case e.PortName != port.Name:
		return ExcludedPort
	case svc.NodeLocal && e.Meta.NodeName != class.NodeName:
		return ExcludedNode
	case (svc.NodeLocal || svc.ClusterLocal) && e.Meta.ClusterID != class.ClusterID:
		return ExcludedCluster
	}
	switch e.Health {
	case collections.Terminating:
		return ExcludedTerminating
	case collections.UnHealthy:
		if !lb.SupportsUnhealthy {
			return ExcludedUnhealthy
		}
	case collections.Draining:
		if !svc.SupportsDrainingEndpoints() {
			return ExcludedDraining
		}
	}
	if DrainingByLabel(&e) && !svc.SupportsDrainingEndpoints() {
		return ExcludedDrainingLabel
	}
	return Kept
}

// Exclude is PlanCLA's rule for one endpoint: the subset's labels, then the rules of the port,
// the proxy's node and cluster, and health. krteds explain reports the same rule.
func Exclude(svc *collections.ServiceInfo, port collections.ServicePort, cp ClusterPolicy, class collections.ProxyClass, e collections.Endpoint) Exclusion {
	if len(cp.SubsetLabels) > 0 && !transforms.SubsetMatch(e.Meta.Label, cp.SubsetLabels) {
		return ExcludedSubset
	}
	return exclude(svc, port, cp.LB, class, e)
}

// planCLA decides the content of the ClusterLoadAssignment of one service port for one (projected)
// proxy class, following istiod's BuildClusterLoadAssignment:
//   - endpoints of the port's name only; on a node-local service only those on the proxy's node;
//   - Terminating endpoints dropped; UNHEALTHY sent when the policy supports it; DRAINING kept only
//     for services with a persistent-session label (either one), and so are the endpoints
//     labelled draining (DrainingLabel), sent as DRAINING;
//   - one LocalityLbEndpoints per locality, sorted by locality;
//   - with failover priorities, each locality is split by priority and priorities are compacted
//     to 0..N.
func planCLA(clusterName string, svc *collections.ServiceInfo, port collections.ServicePort, eps []*collections.Endpoint,
	lb LBPolicy, class collections.ProxyClass, tr *Trace,
) CLAPlan {
	plan := CLAPlan{ClusterName: clusterName}
	groups := groupByLocality(eps, func(e *collections.Endpoint) bool {
		x := exclude(svc, port, lb, class, *e)
		tr.leave(e, x)
		return x == Kept
	})
	if lb.Networks != nil {
		// Split horizon, per locality, before priorities (istiod's EndpointsByNetworkFilter).
		kept := groups[:0]
		for _, g := range groups {
			if g.Endpoints = filterByNetwork(g.Endpoints, lb.Networks, class.Network, port, tr); len(g.Endpoints) > 0 {
				kept = append(kept, g)
			}
		}
		groups = kept
	}
	if len(groups) == 0 {
		return plan
	}
	failover := lb.Failover && len(lb.FailoverPriority) > 0
	if !failover {
		plan.Groups = groups
		return plan
	}
	proxyLabels := ClassLabels(class)
	for _, g := range groups {
		byPriority := map[int][]*collections.Endpoint{}
		for _, e := range g.Endpoints {
			p := FailoverPriority(proxyLabels, e.Meta.LabelValue, lb.FailoverPriority)
			byPriority[p] = append(byPriority[p], e)
		}
		prios := make([]int, 0, len(byPriority))
		for p := range byPriority {
			prios = append(prios, p)
		}
		slices.Sort(prios)
		for _, p := range prios {
			plan.Groups = append(plan.Groups, CLAGroup{Locality: g.Locality, Priority: uint32(p), Endpoints: byPriority[p]})
		}
	}
	renumberPriorities(len(plan.Groups), func(i int) *uint32 { return &plan.Groups[i].Priority })
	return plan
}

// PlanCLA plans the CLA of one cluster (a port, maybe a subset) under its policy for a
// (projected) proxy class: only endpoints carrying the subset's labels, with the policy's
// priorities, locality rules and TLS metadata. Encode renders it. A non-nil trace receives every
// decision about an endpoint (trace.go); the plan is the same with or without one.
func PlanCLA(clusterName string, svc *collections.ServiceInfo, port collections.ServicePort, eps []*collections.Endpoint,
	cp ClusterPolicy, class collections.ProxyClass, tr *Trace,
) CLAPlan {
	plan := planSubset(clusterName, svc, port, eps, cp, class, tr)
	if cp.PostProcess() {
		plan.applyLocalityLB(cp.Setting, cp.EnableFailover, class.Locality, tr)
	}
	tr.place(plan)
	return plan
}

// PlanDNSLoadAssignment plans the load assignment a DNS cluster carries (CDS): as PlanCLA, for no
// proxy in particular, without the locality rules.
func PlanDNSLoadAssignment(clusterName string, svc *collections.ServiceInfo, port collections.ServicePort, eps []*collections.Endpoint, cp ClusterPolicy) CLAPlan {
	return planSubset(clusterName, svc, port, eps, cp, collections.ProxyClass{}, nil)
}

// planSubset is planCLA on the endpoints carrying the subset's labels, with the TLS metadata.
func planSubset(clusterName string, svc *collections.ServiceInfo, port collections.ServicePort, eps []*collections.Endpoint,
	cp ClusterPolicy, class collections.ProxyClass, tr *Trace,
) CLAPlan {
	if len(cp.SubsetLabels) > 0 {
		sel := make([]*collections.Endpoint, 0, len(eps))
		for _, e := range eps {
			if Exclude(svc, port, cp, class, *e) != ExcludedSubset {
				sel = append(sel, e)
			} else {
				tr.leave(e, ExcludedSubset)
			}
		}
		eps = sel
	}
	plan := planCLA(clusterName, svc, port, eps, cp.LB, class, tr)
	plan.TLS = cp.EndpointTLS
	plan.HashKey = svc.HashKey
	return plan
}

// groupByLocality groups the endpoints keep accepts by locality, in locality order (by its
// region/zone/subzone string), each group's endpoints in their order in eps. The groups share one
// array of endpoints, filled in two passes.
func groupByLocality(eps []*collections.Endpoint, keep func(*collections.Endpoint) bool) []CLAGroup {
	var (
		groups []CLAGroup
		counts []int
		byLoc  map[collections.Locality]int
	)
	of := make([]int32, len(eps)) // each endpoint's group, -1 when left out
	n := 0
	for i := range eps {
		e := eps[i]
		if !keep(e) {
			of[i] = -1
			continue
		}
		g := -1
		if byLoc != nil {
			if j, ok := byLoc[e.Meta.Locality]; ok {
				g = j
			}
		} else {
			for j := range groups {
				if groups[j].Locality == e.Meta.Locality {
					g = j
					break
				}
			}
		}
		if g < 0 {
			g = len(groups)
			groups = append(groups, CLAGroup{Locality: e.Meta.Locality})
			counts = append(counts, 0)
			if byLoc != nil {
				byLoc[e.Meta.Locality] = g
			} else if len(groups) > 8 {
				// Many localities: a map instead of the scan.
				byLoc = make(map[collections.Locality]int, 2*len(groups))
				for j := range groups {
					byLoc[groups[j].Locality] = j
				}
			}
		}
		of[i] = int32(g)
		counts[g]++
		n++
	}
	if n == 0 {
		return nil
	}
	all := make([]*collections.Endpoint, n)
	start := 0
	for j := range groups {
		groups[j].Endpoints = all[start : start : start+counts[j]]
		start += counts[j]
	}
	for i := range eps {
		if g := of[i]; g >= 0 {
			groups[g].Endpoints = append(groups[g].Endpoints, eps[i])
		}
	}
	keys := make([]string, len(groups))
	for j := range groups {
		keys[j] = groups[j].Locality.String()
	}
	order := make([]int, len(groups))
	for j := range order {
		order[j] = j
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	sorted := make([]CLAGroup, len(groups))
	for j, k := range order {
		sorted[j] = groups[k]
	}
	return sorted
}

// FailoverPriority is istiod's per-endpoint priority for failoverPriority labels: walking the
// labels in order, the first disagreement at index j gives len(labels)-j; a disagreement on a
// leading topology.istio.io/network label adds len(labels) and the walk goes on. "label=value"
// entries compare the endpoint with value instead of the proxy's label.
func FailoverPriority(proxyLabels map[string]string, epLabel func(string) string, priorities []string) int {
	n := len(priorities)
	includesNetwork := n > 0 && priorities[0] == collections.LabelTopologyNetwork
	priority, adjust := 0, 0
	for j, entry := range priorities {
		// As istiod: "label=value" overrides the proxy's value; any other number of "=" does not.
		parts := strings.Split(entry, "=")
		name := parts[0]
		want := proxyLabels[name]
		if len(parts) == 2 {
			want = parts[1]
		}
		if want != epLabel(name) {
			if j == 0 && includesNetwork {
				adjust = n
				continue
			}
			priority = n - j
			break
		}
	}
	return priority + adjust
}

// renumberPriorities renumbers n priorities to 0..N without gaps, keeping their order (clients
// reject a gap).
func renumberPriorities(n int, at func(i int) *uint32) {
	var used []uint32
	for i := 0; i < n; i++ {
		if p := *at(i); !slices.Contains(used, p) {
			used = append(used, p)
		}
	}
	slices.Sort(used)
	for i := 0; i < n; i++ {
		*at(i) = uint32(slices.Index(used, *at(i)))
	}
}
