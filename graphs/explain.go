package graphs

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	discovery "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// Explanation says why each endpoint a service has is, or is not, in the ClusterLoadAssignment
// a proxy is sent for a cluster: the facts read along the way, each naming the object that
// decided it, and a verdict per endpoint. It is read from the collections that build the CLA, and
// the verdict "sent" is read from the CLA the proxy is served itself.
type Explanation struct {
	Proxy   string `json:"proxy"`
	Cluster string `json:"cluster"`
	// Facts are the steps from the cluster name to the service and the proxy's view of it.
	Facts []string `json:"facts"`
	// Verdict is for the whole cluster when no endpoint can be sent (e.g. no such service).
	Verdict   string            `json:"verdict,omitempty"`
	Endpoints []EndpointVerdict `json:"endpoints"`
}

// EndpointVerdict is one endpoint address: whether it is sent, and the facts behind it.
type EndpointVerdict struct {
	Address string `json:"address"`
	Sent    bool   `json:"sent"`
	// For a sent endpoint: as the CLA has it.
	Port     uint32 `json:"port,omitempty"`
	Health   string `json:"health,omitempty"`
	Locality string `json:"locality,omitempty"`
	Priority uint32 `json:"priority,omitempty"`
	Weight   uint32 `json:"weight,omitempty"`
	// Reason is, for an endpoint not sent, the first step that excluded it.
	Reason string   `json:"reason,omitempty"`
	Facts  []string `json:"facts"`

	// loc is the endpoint's locality, once known.
	loc *collections.Locality
}

// sentEndpoint is an endpoint as the served CLA holds it.
type sentEndpoint struct {
	port             uint32
	health, locality string
	priority, weight uint32
}

// Explain explains, for the connected proxy p, the endpoints of the cluster (all of them, or
// only address when it is not empty).
func (g *Graph) Explain(p *collections.Proxy, cluster, address string) (Explanation, error) {
	ex := Explanation{Proxy: p.ID, Cluster: cluster, Endpoints: []EndpointVerdict{}}
	portNum, subset, host, ok := transforms.ParseClusterName(cluster)
	if !ok {
		return ex, fmt.Errorf("%q is not an EDS cluster name (outbound|<port>|<subset>|<hostname>)", cluster)
	}
	if address != "" {
		if _, err := netip.ParseAddr(address); err != nil {
			return ex, fmt.Errorf("endpoint %q is not an IP address", address)
		}
	}
	fact := func(f string, args ...any) { ex.Facts = append(ex.Facts, fmt.Sprintf(f, args...)) }
	fact("proxy %s: namespace %s, cluster %s, network %q, node %q, locality %q", p.ID, p.View.Namespace, orNone(p.Class.ClusterID), p.Class.Network, p.Class.NodeName, p.Class.Locality.String())

	var svc *collections.ServiceInfo
	for _, s := range g.ServiceInfos.List() {
		// In a multi-cluster mesh, this cluster's Service describes the hostname.
		if s.Hostname == host && (svc == nil || s.Cluster == "" || s.Cluster == g.config.ClusterID) {
			svc = s
		}
	}
	if svc == nil {
		ex.Verdict = fmt.Sprintf("not sent: no Service or ServiceEntry has the hostname %s (the proxy gets an empty CLA)", host)
		return ex, nil
	}
	fact("hostname %s: %s %s", host, registryKind(svc), svc.ResourceName())
	var port *collections.ServicePort
	for _, sp := range transforms.ClusterPorts(svc) {
		if sp.Port == portNum {
			sp := sp
			port = &sp
		}
	}
	if port == nil {
		ex.Verdict = fmt.Sprintf("not sent: %s has no port %d with an EDS cluster (UDP ports and DNS resolution have none)", svc.ResourceName(), portNum)
		return ex, nil
	}
	fact("port %d: named %q", port.Port, port.Name)
	set := g.CLAs.GetKey(cluster)
	if set == nil && subset != "" {
		fact("subset %q: no DestinationRule that may apply defines it; the proxy is sent every endpoint of the port, as from istiod", subset)
		set = g.CLAs.GetKey(transforms.UnknownSubsetKey(cluster))
	}
	if set == nil {
		ex.Verdict = "not sent: the CLA of this cluster is not built yet"
		return ex, nil
	}
	if !transforms.Visible(set.Visibility, p.View.Namespace, p.View.Egress) {
		ex.Verdict = fmt.Sprintf("not sent: %s is not visible from namespace %s (its exportTo %v, or the proxy's Sidecar egress hosts %v); the proxy gets an empty CLA",
			svc.ResourceName(), p.View.Namespace, set.Visibility, p.View.Egress)
		return ex, nil
	}
	sp := g.ServicePolicies.GetKey(svc.ResourceName())
	cp := transforms.ClusterPolicyFor(svc, sp, g.config.SystemNamespace, p.View.Namespace, port.Port, subset)
	if subset != "" && len(cp.SubsetLabels) > 0 {
		fact("subset %q: labels %v", subset, cp.SubsetLabels)
	}
	// The split horizon, as ServiceCLAs sets it: only in a mesh of several networks with gateways.
	shard := g.ServiceEndpoints.GetKey(svc.ResourceName())
	var eps []*collections.Endpoint
	if shard != nil {
		eps = shard.Endpoints
	}
	transforms.NewSplitHorizon(g.NetworkGateways.Get(), eps).Apply(&cp)
	class := transforms.Project(svc, cp, p.Class)

	sent, err := g.sentEndpoints(&p.View, cluster)
	if err != nil {
		return ex, err
	}

	// Every endpoint known for the service: the slices of a Kubernetes Service, then what its
	// shard holds besides (WorkloadEntries, a ServiceEntry's endpoints).
	seen := map[string]int{} // address → index in ex.Endpoints
	verdict := func(addr string) *EndpointVerdict {
		if i, ok := seen[addr]; ok {
			return &ex.Endpoints[i]
		}
		seen[addr] = len(ex.Endpoints)
		ex.Endpoints = append(ex.Endpoints, EndpointVerdict{Address: addr})
		return &ex.Endpoints[len(ex.Endpoints)-1]
	}
	want := func(addr string) bool { return address == "" || addr == address }
	if svc.Registry == collections.RegistryKubernetes {
		for _, slice := range g.slicesOf(svc) {
			g.explainSlice(slice, svc, *port, cp, class, shard, want, verdict)
		}
	}
	if shard != nil {
		for _, e := range shard.Endpoints {
			if !want(e.Address) {
				continue
			}
			if _, ok := seen[e.Address]; ok {
				continue
			}
			v := verdict(e.Address)
			v.fact("%s endpoint %s (%s, cluster %s, network %q)", sourceOf(*e), e.Address, e.Health, orNone(e.Meta.ClusterID), e.Meta.Network)
			judge(v, *e, svc, *port, cp, class, verdict)
		}
	}
	if address != "" && len(ex.Endpoints) == 0 {
		v := verdict(address)
		v.exclude("no EndpointSlice, WorkloadEntry or ServiceEntry of " + svc.ResourceName() + " has this address")
	}
	for i := range ex.Endpoints {
		v := &ex.Endpoints[i]
		if s, ok := sent[v.Address]; ok {
			v.Sent, v.Port, v.Health, v.Locality, v.Priority, v.Weight = true, s.port, s.health, s.locality, s.priority, s.weight
			switch s.health {
			case "UNHEALTHY":
				v.Facts = append(v.Facts, "sent as UNHEALTHY, as by istiod: clients keep it and send it no requests (no outlierDetection minHealthPercent asks otherwise)")
			case "DRAINING":
				v.Facts = append(v.Facts, "sent as DRAINING: a persistent-session service keeps its terminating sessions reachable")
			}
			if v.Reason != "" {
				// The CLA is what is served; explain's rules disagree with it (a defect).
				v.Facts = append(v.Facts, "explain's rules would leave it out ("+v.Reason+"), but the CLA has it")
				v.Reason = ""
			}
			continue
		}
		if v.Reason == "" {
			v.Reason = "not in the CLA, and no rule explain knows excluded it"
			if r := distributeReason(cp, class.Locality, v.loc); r != "" {
				v.Reason = r
			}
		}
	}
	slices.SortStableFunc(ex.Endpoints, func(a, b EndpointVerdict) int { return strings.Compare(a.Address, b.Address) })
	return ex, nil
}

func (v *EndpointVerdict) fact(f string, args ...any) {
	v.Facts = append(v.Facts, fmt.Sprintf(f, args...))
}

// exclude records the first reason that leaves the endpoint out.
func (v *EndpointVerdict) exclude(reason string) {
	if reason != "" && v.Reason == "" {
		v.Reason = reason
	}
}

// sentEndpoints reads the CLA a proxy of view v is served for the cluster.
func (g *Graph) sentEndpoints(v *collections.View, cluster string) (map[string]sentEndpoint, error) {
	r, pending := g.Resolve(v, transforms.TypeCLA, cluster)
	if r == nil {
		if pending {
			return nil, fmt.Errorf("the CLA of %s for this proxy is still being computed; ask again", cluster)
		}
		return map[string]sentEndpoint{}, nil
	}
	cla := &endpoint.ClusterLoadAssignment{}
	if err := proto.Unmarshal(r.Body, cla); err != nil {
		return nil, fmt.Errorf("decoding the CLA of %s: %w", cluster, err)
	}
	out := map[string]sentEndpoint{}
	for _, l := range cla.Endpoints {
		loc := collections.Locality{Region: l.GetLocality().GetRegion(), Zone: l.GetLocality().GetZone(), Subzone: l.GetLocality().GetSubZone()}
		for _, e := range l.LbEndpoints {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out[sa.GetAddress()] = sentEndpoint{port: sa.GetPortValue(), health: e.HealthStatus.String(), locality: loc.String(),
				priority: l.Priority, weight: e.GetLoadBalancingWeight().GetValue()}
		}
	}
	return out, nil
}

// slicesOf lists the EndpointSlices labelled for a Service, by name.
func (g *Graph) slicesOf(svc *collections.ServiceInfo) []*collections.Slice {
	var out []*collections.Slice
	for _, s := range g.Inputs.EndpointSlices.List() {
		if s.Namespace == svc.Namespace && s.Service == svc.Name {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b *collections.Slice) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// explainSlice walks one slice's endpoints the way SliceEndpointsOf, the shard and PlanCLA do.
func (g *Graph) explainSlice(slice *collections.Slice, svc *collections.ServiceInfo, port collections.ServicePort, cp transforms.ClusterPolicy,
	class collections.ProxyClass, shard *collections.ServiceEndpoints, want func(string) bool, verdict func(string) *EndpointVerdict,
) {
	key := slice.Key
	produced := g.SliceEndpoints.GetKey(key)
	var leftOut []collections.LeftOut
	if produced != nil {
		leftOut = produced.Left
	}
	var problems []collections.Problem
	if op := g.Problems.GetKey("EndpointSlice/" + key); op != nil {
		problems = op.Problems
	}
	for i, se := range slice.Endpoints {
		for _, addr := range se.Addresses {
			if !want(addr) {
				if ip, err := netip.ParseAddr(addr); err != nil || !want(ip.String()) {
					continue
				}
			}
			ip, err := netip.ParseAddr(addr)
			name := addr
			if err == nil {
				name = ip.String()
			}
			v := verdict(name)
			v.fact("EndpointSlice %s endpoint %d (%s): %s", key, i, addr, conditions(se.Conditions))
			if slice.MCS {
				v.exclude("slice " + key + " belongs to a multi-cluster service (" + collections.LabelMCSServiceName + "): ignored, as by istiod")
				continue
			}
			if slice.AddressType == discovery.AddressTypeFQDN {
				v.exclude("slice " + key + " has addressType FQDN: ignored, as by istiod")
				continue
			}
			// What the slice transform left out, and by which rule, as it recorded it.
			left := false
			for _, l := range leftOut {
				if l.Endpoint != i || l.Address != addr {
					continue
				}
				left = true
				if l.Reason == collections.ReasonPodPending {
					v.exclude(l.Detail)
				} else {
					v.exclude(fmt.Sprintf("skipped as invalid: %s (%s)", l.Detail, l.Reason))
				}
			}
			if left {
				continue
			}
			if se.Pod != "" {
				v.fact("targetRef Pod %s found", se.Pod)
			} else {
				v.fact("no Pod targetRef: the Pod is looked up by its IP in %s", slice.Namespace)
			}
			var mine []collections.Endpoint
			if produced != nil {
				for _, e := range produced.Endpoints {
					if e.Address == name {
						mine = append(mine, e)
					}
				}
			}
			if len(mine) == 0 {
				// The slice's own problems (its ports), not those of an address of it.
				var why []string
				for _, pr := range problems {
					if !slices.ContainsFunc(leftOut, func(l collections.LeftOut) bool { return l.Detail == pr.Detail }) {
						why = append(why, pr.Detail)
					}
				}
				if len(why) == 0 {
					why = []string{"its ports: " + slicePortNames(slice)}
				}
				v.exclude("slice " + key + " gives no endpoint for it: " + strings.Join(why, "; "))
				continue
			}
			var onPort *collections.Endpoint
			for i := range mine {
				if mine[i].PortName == port.Name {
					onPort = &mine[i]
				}
			}
			if onPort == nil {
				v.exclude(fmt.Sprintf("the slice has no port named %q (service port %d); its ports: %s", port.Name, port.Port, slicePortNames(slice)))
				continue
			}
			e := *onPort
			v.fact("health %s (from the conditions%s)", e.Health, persistent(svc))
			if e.Pod != "" {
				v.fact("workload %s, labels %v, locality %q", e.Pod, e.Meta.PodLabels.Map(), e.Meta.Locality.String())
			}
			if shard != nil && !slices.ContainsFunc(shard.Endpoints, func(o *collections.Endpoint) bool { return o.Key() == e.Key() && o.Slice == e.Slice }) {
				v.exclude("another slice of the service has the same address and port name; the healthiest copy, then the lowest slice name, is kept")
				continue
			}
			judge(v, e, svc, port, cp, class, verdict)
		}
	}
}

// judge applies PlanCLA's rules to one endpoint, then the network split horizon: an
// endpoint reached through a gateway is not sent itself; the gateway is.
func judge(v *EndpointVerdict, e collections.Endpoint, svc *collections.ServiceInfo, port collections.ServicePort, cp transforms.ClusterPolicy,
	class collections.ProxyClass, verdict func(string) *EndpointVerdict,
) {
	if v.Reason != "" {
		return
	}
	v.loc = &e.Meta.Locality
	if r := exclusionReason(transforms.Exclude(svc, port, cp, class, e), e, port, cp, class); r != "" {
		v.exclude(r)
		return
	}
	if cp.LB.Networks == nil {
		return
	}
	direct, gws := transforms.NetworkRoute(e, cp.LB.Networks, class.Network)
	switch {
	case direct:
	case len(gws) == 0:
		v.exclude(fmt.Sprintf("left out by the network split horizon: on network %q, the proxy on %q, and without mTLS (tlsMode %q) no gateway may carry it", e.Meta.Network, class.Network, e.Meta.TLSMode))
	default:
		var addrs []string
		for _, gw := range gws {
			addrs = append(addrs, fmt.Sprintf("%s:%d", gw.Addr, gw.Port))
			gv := verdict(gw.Addr)
			gv.fact("the gateway of network %q (cluster %s) for %s", gw.Network, orNone(gw.Cluster), e.Address)
		}
		v.exclude(fmt.Sprintf("left out by the network split horizon: on network %q, the proxy on %q; reached through the gateway %s instead", e.Meta.Network, class.Network, strings.Join(addrs, ", ")))
	}
}

// distributeReason words the one locality rule that removes endpoints (the plan's distribute, transforms/locality.go):
// the first distribute entry whose from matches the proxy's locality sends nothing to a locality
// none of its to patterns matches.
func distributeReason(cp transforms.ClusterPolicy, proxy collections.Locality, loc *collections.Locality) string {
	if loc == nil || !cp.PostProcess() || cp.Setting == nil {
		return ""
	}
	for _, d := range cp.Setting.Distribute {
		if !transforms.LocalityMatch(proxy, d.From) {
			continue
		}
		for to := range d.To {
			if transforms.LocalityMatch(*loc, to) {
				return ""
			}
		}
		return fmt.Sprintf("left out by the DestinationRule's localityLbSetting distribute: from %q (the proxy is in %q) no weight goes to %q",
			d.From, proxy.String(), loc.String())
	}
	return ""
}

// exclusionReason words a rule of transforms.Exclude for one endpoint.
func exclusionReason(x transforms.Exclusion, e collections.Endpoint, port collections.ServicePort, cp transforms.ClusterPolicy, class collections.ProxyClass) string {
	switch x {
	case transforms.ExcludedPort:
		return fmt.Sprintf("its port is named %q, not %q (service port %d)", e.PortName, port.Name, port.Port)
	case transforms.ExcludedNode:
		return fmt.Sprintf("internalTrafficPolicy Local: it runs on node %q, the proxy on %q", e.Meta.NodeName, class.NodeName)
	case transforms.ExcludedCluster:
		return fmt.Sprintf("the service is local to each cluster: it is in cluster %q, the proxy in %q", e.Meta.ClusterID, class.ClusterID)
	case transforms.ExcludedTerminating:
		return "terminating: never sent"
	case transforms.ExcludedUnhealthy:
		return "not ready: UNHEALTHY endpoints are not sent where the DestinationRule's outlierDetection sets minHealthPercent > 0 (istiod's supportsUnhealthyEndpoints)"
	case transforms.ExcludedDraining:
		return "not ready but serving and terminating: DRAINING endpoints are sent only for persistent-session services"
	case transforms.ExcludedSubset:
		return fmt.Sprintf("its labels %v do not match the subset's %v", e.Meta.PodLabels.Map(), cp.SubsetLabels)
	}
	return ""
}

func conditions(c discovery.EndpointConditions) string {
	b := func(p *bool) string {
		if p == nil {
			return "unset"
		}
		return fmt.Sprint(*p)
	}
	return "ready=" + b(c.Ready) + " serving=" + b(c.Serving) + " terminating=" + b(c.Terminating)
}

func slicePortNames(s *collections.Slice) string {
	var names []string
	for _, p := range s.Ports {
		n := ""
		if p.Name != nil {
			n = *p.Name
		}
		names = append(names, fmt.Sprintf("%q", n))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func persistent(svc *collections.ServiceInfo) string {
	if svc.SupportsDrainingEndpoints() {
		return "; a persistent-session service"
	}
	return ""
}

func registryKind(svc *collections.ServiceInfo) string {
	if svc.Registry == collections.RegistryKubernetes {
		return "Service"
	}
	return "ServiceEntry host"
}

func sourceOf(e collections.Endpoint) string {
	if e.Slice != "" {
		return "slice " + e.Slice
	}
	if e.Pod != "" {
		return "workload " + e.Pod
	}
	return "registry"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
