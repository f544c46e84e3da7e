package transforms

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/krteds/krteds/collections"
)

// Type URLs of the resources krteds serves.
const (
	TypeCLA      = resourcev3.EndpointType
	TypeCluster  = resourcev3.ClusterType
	TypeListener = resourcev3.ListenerType
	TypeRoute    = resourcev3.RouteType
)

// Failover priority labels used for trafficDistribution, as istiod's GetEffectiveLbSetting.
var (
	PreferSameZoneLabels = []string{collections.LabelTopologyNetwork, collections.LabelTopologyRegion, collections.LabelTopologyZone}
	PreferSameNodeLabels = []string{collections.LabelTopologyNetwork, collections.LabelTopologyRegion, collections.LabelTopologyZone,
		collections.LabelTopologySubzone, collections.LabelHostname}
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
		p.FailoverPriority, p.Failover = PreferSameZoneLabels, true
	case collections.TrafficDistributionPreferSameNode:
		p.FailoverPriority, p.Failover = PreferSameNodeLabels, true
	}
	return p
}

// ClassLabels are the proxy labels a class implies: the proxy's own labels it keeps, augmented
// with the topology labels of its locality, network and node, and its cluster (as the proxy's
// effective labels are).
func ClassLabels(c collections.ProxyClass) map[string]string {
	return AugmentLabels(collections.ParseCanonicalLabels(c.Labels), c.ClusterID, c.Locality, c.NodeName, c.Network)
}

// Project keeps only the class dimensions that the CLAs of svc under policy depend on, so that
// proxies that differ only elsewhere share one CLA. The projection of a class is itself a class.
func Project(svc *collections.ServiceInfo, policy LBPolicy, c collections.ProxyClass) collections.ProxyClass {
	var out collections.ProxyClass
	if svc.NodeLocal {
		out.NodeName = c.NodeName
	}
	if policy.Networks != nil && policy.Networks.Crosses {
		out.Network = c.Network
	}
	if svc.NodeLocal || svc.ClusterLocal {
		// Other clusters' shards are left out (node names are per cluster).
		out.ClusterID = c.ClusterID
	}
	if policy.Failover && len(policy.FailoverPriority) > 0 {
		// Only the labels the priorities read matter: the proxy's own ones it keeps, and the
		// topology labels derived from these dimensions.
		labels := ClassLabels(c)
		own := collections.ParseCanonicalLabels(c.Labels)
		needs := map[string]bool{}
		var kept map[string]string
		for _, l := range policy.FailoverPriority {
			name, _, _ := strings.Cut(l, "=")
			needs[name] = true
			// The proxy's own value of each label an entry compares with the proxy's (of a
			// topology label too: a network label of the proxy's own wins over its network).
			if n, ok := proxyLabelOf(l); ok {
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

// ProjectionKey renders a projected class as a key suffix; "" means the CLA is the same for
// every proxy.
func ProjectionKey(p collections.ProxyClass) string {
	if p == (collections.ProxyClass{}) {
		return ""
	}
	return p.Key()
}

// ClusterName is outbound|<port>|<subset>|<hostname>.
func ClusterName(port int32, subset, hostname string) string {
	return "outbound|" + strconv.Itoa(int(port)) + "|" + subset + "|" + hostname
}

// ParseClusterName splits outbound|<port>|<subset>|<hostname> (without allocating).
func ParseClusterName(name string) (port int32, subset, hostname string, ok bool) {
	rest, found := strings.CutPrefix(name, "outbound|")
	if !found {
		return 0, "", "", false
	}
	ps, rest, found := strings.Cut(rest, "|")
	if !found {
		return 0, "", "", false
	}
	subset, hostname, found = strings.Cut(rest, "|")
	if !found || strings.Contains(hostname, "|") {
		return 0, "", "", false
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p < 1 || p > 65535 {
		return 0, "", "", false
	}
	return int32(p), subset, hostname, true
}

// CLAPlan is a ClusterLoadAssignment before encoding: which endpoints, grouped by locality and
// priority, in order.
type CLAPlan struct {
	ClusterName string
	Groups      []CLAGroup
	// TLS says which endpoints carry the tlsMode metadata.
	TLS TLSMetadata
}

// CLAGroup is one LocalityLbEndpoints.
type CLAGroup struct {
	Locality collections.Locality
	Priority uint32
	// Endpoints point into the endpoints the plan was made from (or, for a network gateway,
	// at an endpoint of the plan's own); none may be changed.
	Endpoints []*collections.Endpoint
}

// Exclusion is the rule by which PlanClusterCLA leaves an endpoint out of a CLA (Kept: none).
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
)

// Exclude is PlanCLA's rule for one endpoint: which rule, if any, leaves it out of the CLA of
// the service port for the (projected) proxy class. krteds explain reports the same rule.
func Exclude(svc *collections.ServiceInfo, port collections.ServicePort, policy LBPolicy, class collections.ProxyClass, e collections.Endpoint) Exclusion {
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
		if !policy.SupportsUnhealthy {
			return ExcludedUnhealthy
		}
	case collections.Draining:
		if !svc.SupportsDrainingEndpoints() {
			return ExcludedDraining
		}
	}
	return Kept
}

// ExcludeFromCluster is PlanClusterCLA's rule for one endpoint: the subset's labels, then
// Exclude.
func ExcludeFromCluster(svc *collections.ServiceInfo, port collections.ServicePort, cp ClusterPolicy, class collections.ProxyClass, e collections.Endpoint) Exclusion {
	if len(cp.SubsetLabels) > 0 && !subsetMatch(e.Meta.Label, cp.SubsetLabels) {
		return ExcludedSubset
	}
	return Exclude(svc, port, cp.LB, class, e)
}

// PlanCLA decides the content of the ClusterLoadAssignment of one service port for one (projected)
// proxy class, following istiod's BuildClusterLoadAssignment:
//   - endpoints of the port's name only; on a node-local service only those on the proxy's node;
//   - Terminating endpoints dropped; UNHEALTHY sent when the policy supports it; DRAINING kept only
//     for services with a persistent-session label (either one);
//   - one LocalityLbEndpoints per locality, sorted by locality;
//   - with failover priorities, each locality is split by priority and priorities are compacted
//     to 0..N.
func PlanCLA(clusterName string, svc *collections.ServiceInfo, port collections.ServicePort, eps []*collections.Endpoint,
	policy LBPolicy, class collections.ProxyClass,
) CLAPlan {
	plan := CLAPlan{ClusterName: clusterName}
	groups := groupByLocality(eps, func(e *collections.Endpoint) bool { return Exclude(svc, port, policy, class, *e) == Kept })
	if policy.Networks != nil {
		// Split horizon, per locality, before priorities (istiod's EndpointsByNetworkFilter).
		kept := groups[:0]
		for _, g := range groups {
			if g.Endpoints = filterByNetwork(g.Endpoints, policy.Networks, class.Network, port); len(g.Endpoints) > 0 {
				kept = append(kept, g)
			}
		}
		groups = kept
	}
	if len(groups) == 0 {
		return plan
	}
	failover := policy.Failover && len(policy.FailoverPriority) > 0
	if !failover {
		plan.Groups = groups
		return plan
	}
	proxyLabels := ClassLabels(class)
	for _, g := range groups {
		byPriority := map[int][]*collections.Endpoint{}
		for _, e := range g.Endpoints {
			p := FailoverPriority(proxyLabels, e.Meta.LabelValue, policy.FailoverPriority)
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

// Proto renders the plan as a ClusterLoadAssignment message: endpoint weight (1 unless a
// WorkloadEntry sets one), tlsMode and
// istio.workload metadata, locality weight = sum of endpoint weights.
func (p CLAPlan) Proto() *endpoint.ClusterLoadAssignment {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: p.ClusterName}
	for _, g := range p.Groups {
		lbs := make([]*endpoint.LbEndpoint, 0, len(g.Endpoints))
		for _, e := range g.Endpoints {
			lbs = append(lbs, lbEndpoint(*e, p.TLS.Value(e.Meta.TLSMode)))
		}
		loc := &core.Locality{Region: g.Locality.Region, Zone: g.Locality.Zone, SubZone: g.Locality.Subzone}
		cla.Endpoints = append(cla.Endpoints, localityGroup(loc, g.Priority, lbs))
	}
	return cla
}

// PlanClusterCLA plans the CLA of one cluster (a port, maybe a subset) under its policy: only
// endpoints carrying the subset's labels, with the policy's priorities and TLS metadata.
func PlanClusterCLA(clusterName string, svc *collections.ServiceInfo, port collections.ServicePort, eps []*collections.Endpoint,
	cp ClusterPolicy, class collections.ProxyClass,
) CLAPlan {
	if len(cp.SubsetLabels) > 0 {
		sel := make([]*collections.Endpoint, 0, len(eps))
		for _, e := range eps {
			if ExcludeFromCluster(svc, port, cp, class, *e) != ExcludedSubset {
				sel = append(sel, e)
			}
		}
		eps = sel
	}
	plan := PlanCLA(clusterName, svc, port, eps, cp.LB, class)
	plan.TLS = cp.TLS
	return plan
}

// EncodeClusterCLA renders a planned CLA, applying the policy's message-level locality load
// balancing (distribute weights, region failover, zone-aware buckets) when it has any.
func EncodeClusterCLA(plan CLAPlan, cp ClusterPolicy, class collections.ProxyClass) ([]byte, error) {
	if !cp.PostProcess() {
		return plan.Encode(), nil
	}
	cla := plan.Proto()
	ApplyLocalityLoadBalancer(cla, cp.Setting, cp.EnableFailover, class.Locality, nil, nil)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cla)
	if err != nil {
		return nil, fmt.Errorf("marshalling ClusterLoadAssignment %s: %w", plan.ClusterName, err)
	}
	return b, nil
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

// compactPriorities renumbers the priorities of localities to 0..N without gaps.
func compactPriorities(l []*endpoint.LocalityLbEndpoints) {
	renumberPriorities(len(l), func(i int) *uint32 { return &l[i].Priority })
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

func localityGroup(loc *core.Locality, priority uint32, lbs []*endpoint.LbEndpoint) *endpoint.LocalityLbEndpoints {
	var weight uint64
	for _, lb := range lbs {
		weight += uint64(lb.GetLoadBalancingWeight().GetValue())
	}
	if weight > math.MaxUint32 {
		weight = math.MaxUint32
	}
	return &endpoint.LocalityLbEndpoints{
		Locality:            loc,
		LbEndpoints:         lbs,
		LoadBalancingWeight: wrapperspb.UInt32(uint32(weight)),
		Priority:            priority,
	}
}

var healthOf = map[collections.HealthStatus]core.HealthStatus{
	collections.Healthy:   core.HealthStatus_HEALTHY,
	collections.UnHealthy: core.HealthStatus_UNHEALTHY,
	collections.Draining:  core.HealthStatus_DRAINING,
}

// lbEndpoint renders one endpoint; tlsMode is its tlsMode metadata value ("" for none).
func lbEndpoint(e collections.Endpoint, tlsMode string) *endpoint.LbEndpoint {
	m := e.Meta
	fm := map[string]*structpb.Struct{
		"istio": {Fields: map[string]*structpb.Value{
			"workload": structpb.NewStringValue(m.WorkloadName + ";" + m.Namespace + ";" + m.CanonicalName + ";" + m.CanonicalRevision + ";" + m.ClusterID),
		}},
	}
	if tlsMode != "" {
		fm["envoy.transport_socket_match"] = &structpb.Struct{Fields: map[string]*structpb.Value{
			"tlsMode": structpb.NewStringValue(tlsMode),
		}}
	}
	return &endpoint.LbEndpoint{
		HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{
			Address: &core.Address{Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{
				Address:       e.Address,
				PortSpecifier: &core.SocketAddress_PortValue{PortValue: e.Port},
			}}},
		}},
		HealthStatus:        healthOf[e.Health],
		LoadBalancingWeight: wrapperspb.UInt32(m.LBWeight()),
		Metadata:            &core.Metadata{FilterMetadata: fm},
	}
}

// MaxResourceBytes is the default gRPC receive limit of xDS clients (4 MiB).
const MaxResourceBytes = 4 << 20

// Marshal encodes a resource deterministically and versions it by content.
func Marshal(name, typeURL string, m proto.Message) (*collections.Resource, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshalling %s %s: %w", typeURL, name, err)
	}
	return Versioned(name, typeURL, b), nil
}

// Versioned wraps an encoded resource, versioned by a hash of its bytes.
func Versioned(name, typeURL string, body []byte) *collections.Resource {
	return &collections.Resource{Name: name, TypeURL: typeURL, Version: xxhash.Sum64(body), Body: body}
}

// EmptyCLA is the ClusterLoadAssignment of a cluster without endpoints for a proxy (istiod sends
// one for an unknown cluster, or one the proxy cannot see).
func EmptyCLA(name string) *collections.Resource {
	return Versioned(name, TypeCLA, CLAPlan{ClusterName: name}.Encode())
}
