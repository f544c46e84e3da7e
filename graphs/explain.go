package graphs

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

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
	// TLSMode is the endpoint's tlsMode metadata ("" for none: clients send it plaintext).
	TLSMode string `json:"tlsMode,omitempty"`
	// Reason is, for an endpoint not sent, the first step that excluded it.
	Reason string   `json:"reason,omitempty"`
	Facts  []string `json:"facts"`

	// loc is the endpoint's locality, once known; tls is the tlsMode the rules give it and why.
	loc *collections.Locality
	tls *tlsVerdict
}

// sentEndpoint is an endpoint as the served CLA holds it.
type sentEndpoint struct {
	port                      uint32
	health, locality, tlsMode string
	priority, weight          uint32
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
	if shared := g.sharedHost(host); len(shared) > 0 {
		// ServiceEntries of several namespaces define the host: the proxy sees one namespace's.
		namespaces := make([]string, len(shared))
		for i, s := range shared {
			namespaces[i] = s.Namespace
		}
		slices.Sort(namespaces)
		owner := transforms.PickHostNamespace(shared, &p.View)
		if owner == "" {
			ex.Verdict = fmt.Sprintf("not sent: ServiceEntries of namespaces %v define %s, and none is visible from namespace %s (their exportTo, or the proxy's Sidecar egress hosts %v); the proxy gets an empty CLA",
				namespaces, host, p.View.Namespace, p.View.Egress)
			return ex, nil
		}
		fact("hostname %s: ServiceEntries of namespaces %v define it; the proxy sees namespace %s's (its own namespace's first, else the oldest exported to it by name, else the oldest exported everywhere)",
			host, namespaces, owner)
		svc = deref(g.ServiceInfos.GetKey(owner + "/" + host))
	} else {
		for _, s := range g.ServiceInfos.List() {
			// In a multi-cluster mesh, this cluster's Service describes the hostname.
			if s.Hostname == host && (svc == nil || s.Cluster == "" || s.Cluster == g.config.ClusterID) {
				svc = s
			}
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
	set := g.CLAs.GetKey(transforms.SetKey(svc, cluster))
	if set == nil && subset != "" {
		fact("subset %q: no DestinationRule that may apply defines it; the proxy is sent every endpoint of the port, as from istiod", subset)
		set = g.CLAs.GetKey(transforms.SetKey(svc, transforms.UnknownSubsetKey(cluster)))
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
	// Every policy: the resolution reads only those of an endpoint's namespace and the root's.
	cp.Peer = transforms.NewPeerAuthn(g.config.SystemNamespace, g.PeerAuthentications.List())
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
			v.Sent, v.Port, v.Health, v.Locality, v.Priority, v.Weight, v.TLSMode = true, s.port, s.health, s.locality, s.priority, s.weight, s.tlsMode
			switch s.health {
			case "UNHEALTHY":
				v.Facts = append(v.Facts, "sent as UNHEALTHY, as by istiod: clients keep it and send it no requests (no outlierDetection minHealthPercent asks otherwise)")
			case "UNKNOWN":
				v.Facts = append(v.Facts, "sent with no health status (UNKNOWN), as istiod sends ServiceEntry and WorkloadEntry endpoints and network gateways: clients use it as healthy unless they check its health themselves")
			case "DRAINING":
				v.Facts = append(v.Facts, "sent as DRAINING: a persistent-session service keeps its terminating sessions reachable")
			}
			if v.tls != nil {
				v.Facts = append(v.Facts, v.tls.fact(s.tlsMode))
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
			tls := e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue()
			out[sa.GetAddress()] = sentEndpoint{port: sa.GetPortValue(), health: e.HealthStatus.String(), locality: loc.String(),
				priority: l.Priority, weight: e.GetLoadBalancingWeight().GetValue(), tlsMode: tls}
		}
	}
	return out, nil
}

// deref is what GetKey found in a collection of pointers (nil when it found nothing).
func deref[T any](p **T) *T {
	if p == nil {
		return nil
	}
	return *p
}
