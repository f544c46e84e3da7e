package eds

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"strconv"

	meshconfig "istio.io/api/mesh/v1alpha1"
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/policy"
)

// ServiceGateways gives the network gateways of a cluster's Services, as istiod reads them from
// the registry: a Service labelled topology.istio.io/network is its network's gateway at each of
// its external addresses (load-balancer ingress IPs, then externalIPs), on the port its
// networking.istio.io/gatewayPort label names, else on 15443 if it exposes that port. It
// Fetches only the labelled Services: no other Service change recomputes it.
func ServiceGateways(cfg collections.Config, services krt.Collection[*corev1.Service]) transforms.Many[struct{}, collections.ClusterGateways] {
	return transforms.Many[struct{}, collections.ClusterGateways]{Reads: []any{services}, Fn: func(ctx krt.HandlerContext, _ struct{}) []collections.ClusterGateways {
		labelled := krt.Fetch(ctx, services, krt.FilterGeneric(func(o any) bool {
			return o.(*corev1.Service).Labels[collections.LabelTopologyNetwork] != ""
		}))
		out := collections.ClusterGateways{Source: "cluster/" + cfg.ClusterID}
		for _, svc := range labelled {
			out.Gateways = append(out.Gateways, gatewaysOf(cfg, svc)...)
		}
		slices.SortFunc(out.Gateways, func(a, b collections.NetworkGateway) int {
			return cmp.Or(cmp.Compare(a.Network, b.Network), compareGateways(a, b))
		})
		out.Gateways = slices.Compact(out.Gateways)
		return []collections.ClusterGateways{out}
	}}
}

func gatewaysOf(cfg collections.Config, svc *corev1.Service) []collections.NetworkGateway {
	network := svc.Labels[collections.LabelTopologyNetwork]
	var port uint32
	if v, err := strconv.ParseUint(svc.Labels[collections.LabelGatewayPort], 10, 16); err == nil && v > 0 {
		port = uint32(v)
	} else if slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Port == collections.GatewayMTLSPort }) {
		port = collections.GatewayMTLSPort
	}
	if port == 0 {
		return nil
	}
	var out []collections.NetworkGateway
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			out = append(out, collections.NetworkGateway{Network: network, Cluster: cfg.ClusterID, Addr: in.IP, Port: port})
		}
	}
	for _, ip := range svc.Spec.ExternalIPs {
		out = append(out, collections.NetworkGateway{Network: network, Cluster: cfg.ClusterID, Addr: ip, Port: port})
	}
	return out
}

// MeshNetworkSettings reads a meshNetworks configuration: the network of each cluster named by a
// fromRegistry entry, and the gateways given by address (a registryServiceName gateway is not
// read; a Service labelled with its network is).
func MeshNetworkSettings(mn *meshconfig.MeshNetworks) (registry map[string]string, gateways []collections.NetworkGateway) {
	for _, name := range slices.Sorted(maps.Keys(mn.GetNetworks())) {
		n := mn.GetNetworks()[name]
		for _, e := range n.GetEndpoints() {
			if r := e.GetFromRegistry(); r != "" {
				if registry == nil {
					registry = map[string]string{}
				}
				registry[r] = name
			}
		}
		for _, g := range n.GetGateways() {
			if a := g.GetAddress(); a != "" && g.GetPort() > 0 {
				gateways = append(gateways, collections.NetworkGateway{Network: name, Addr: a, Port: g.GetPort()})
			}
		}
	}
	return registry, gateways
}

// GatewayIndex indexes every network gateway, as istiod's NetworkGateways.update: by network and
// by network and cluster, sorted by address and port, and the weight scale factor, the least
// common multiple of every list's length.
func GatewayIndex(gateways krt.Collection[collections.ClusterGateways]) (krt.TransformationEmpty[collections.NetworkGateways], []any) {
	return func(ctx krt.HandlerContext) *collections.NetworkGateways {
		out := &collections.NetworkGateways{ScaleFactor: 1}
		var all []collections.NetworkGateway
		for _, cg := range krt.Fetch(ctx, gateways) {
			all = append(all, cg.Gateways...)
		}
		if len(all) == 0 {
			return out
		}
		// A gateway two sources name is one gateway.
		slices.SortFunc(all, func(a, b collections.NetworkGateway) int {
			return cmp.Or(cmp.Compare(a.Network, b.Network), cmp.Compare(a.Cluster, b.Cluster), compareGateways(a, b))
		})
		all = slices.Compact(all)
		out.ByNetwork, out.ByNetworkCluster = map[string][]collections.NetworkGateway{}, map[string][]collections.NetworkGateway{}
		for _, g := range all {
			out.ByNetwork[g.Network] = append(out.ByNetwork[g.Network], g)
			k := g.Network + "/" + g.Cluster
			out.ByNetworkCluster[k] = append(out.ByNetworkCluster[k], g)
		}
		lcm := 1
		for _, m := range []map[string][]collections.NetworkGateway{out.ByNetwork, out.ByNetworkCluster} {
			for k, gws := range m {
				slices.SortFunc(gws, compareGateways)
				m[k] = gws
				lcm = lcm / gcd(lcm, len(gws)) * len(gws)
			}
		}
		out.ScaleFactor = uint32(min(lcm, math.MaxUint32))
		return out
	}, []any{gateways}
}

func compareGateways(a, b collections.NetworkGateway) int {
	return cmp.Or(cmp.Compare(a.Addr, b.Addr), cmp.Compare(a.Port, b.Port))
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// NetworkFilter is what routes a CLA's endpoints across networks: the gateways, and which
// endpoints carry mTLS (cross-network traffic is mTLS only).
type NetworkFilter struct {
	Gateways *collections.NetworkGateways
	TLS      policy.EndpointTLS
	// Crosses: some endpoint is on a network with gateways, so the CLA depends on the proxy's
	// network. Without it only the weights scale, the same for every proxy.
	Crosses bool
}

// SplitHorizon is the split horizon of one service's CLAs: nil in a mesh without gateways.
type SplitHorizon struct {
	gateways *collections.NetworkGateways
	// Crosses: some endpoint of the service is behind a gateway.
	Crosses bool
}

// NewSplitHorizon is the split horizon of a service with these endpoints (nil without gateways).
func NewSplitHorizon(gateways *collections.NetworkGateways, eps []*collections.Endpoint) *SplitHorizon {
	if !gateways.Enabled() {
		return nil
	}
	return &SplitHorizon{gateways: gateways, Crosses: CrossesNetworks(gateways, eps)}
}

// Apply sets a cluster policy's network filter (nothing on a nil horizon).
func (h *SplitHorizon) Apply(cp *ClusterPolicy) {
	if h != nil {
		cp.LB.Networks = &NetworkFilter{Gateways: h.gateways, TLS: cp.EndpointTLS, Crosses: h.Crosses}
	}
}

// CrossesNetworks reports whether some endpoint is on a network that has gateways.
func CrossesNetworks(gws *collections.NetworkGateways, eps []*collections.Endpoint) bool {
	for _, e := range eps {
		if e.Meta.Network != "" && len(gws.For(e.Meta.Network, e.Meta.ClusterID)) > 0 {
			return true
		}
	}
	return false
}

// filterByNetwork is istiod's EndpointsByNetworkFilter for a sidecar, on one locality's
// endpoints: every weight is scaled by the scale factor; an endpoint the proxy reaches directly
// (its network, no gateway for the endpoint's, or either network unset, unless the proxy has no
// network and the endpoint's has gateways) is kept; any other is dropped unless it carries mTLS,
// and its weight is split evenly (integer division) among its network's gateways (of its cluster
// if it has any, else of the network), each gateway then one endpoint carrying the sum (at
// least 1), in address order, with tlsMode istio, the gateway's cluster and network and no
// health status.
// NetworkRoute is how the split horizon sends an endpoint to a proxy on proxyNetwork: directly,
// through the gateways of the endpoint's network, or (neither) not at all: an endpoint on another
// network with gateways is reached through them only with mTLS (istiod's isMtlsEnabled: its
// tlsMode metadata is istio).
func NetworkRoute(e collections.Endpoint, nf *NetworkFilter, proxyNetwork string) (direct bool, gateways []collections.NetworkGateway) {
	epNet := e.Meta.Network
	gws := nf.Gateways.For(epNet, e.Meta.ClusterID)
	force := proxyNetwork == "" && epNet != "" && len(gws) > 0
	if !force && (epNet == "" || proxyNetwork == "" || epNet == proxyNetwork || len(gws) == 0) {
		return true, nil
	}
	if nf.TLS.Value(&e) != collections.TLSModeIstio {
		return false, nil
	}
	return false, gws
}

func filterByNetwork(eps []*collections.Endpoint, nf *NetworkFilter, proxyNetwork string, port collections.ServicePort, tr *Trace) []*collections.Endpoint {
	sf := max(nf.Gateways.ScaleFactor, 1)
	out := make([]*collections.Endpoint, 0, len(eps))
	var gwWeights map[collections.NetworkGateway]uint32
	for _, e := range eps {
		w := uint32(math.MaxUint32)
		if ew := e.Meta.LBWeight(); ew < math.MaxUint32/sf {
			w = ew * sf
		}
		direct, gws := NetworkRoute(*e, nf, proxyNetwork)
		if direct {
			if w != e.Meta.LBWeight() {
				scaled := *e
				scaled.Meta = e.Meta.Edit(func(m *collections.EndpointMeta) { m.Weight = w })
				e = &scaled
			}
			out = append(out, e)
			continue
		}
		if len(gws) == 0 {
			tr.leave(e, ExcludedNetwork)
			continue
		}
		tr.via(e, gws)
		if gwWeights == nil {
			gwWeights = map[collections.NetworkGateway]uint32{}
		}
		per := w / uint32(len(gws))
		for _, g := range gws {
			gwWeights[g] += per
		}
	}
	for _, g := range slices.SortedFunc(maps.Keys(gwWeights), compareGateways) {
		w := gwWeights[g]
		if w == 0 {
			w = 1
		}
		// istiod's gateway endpoint carries no health (UNKNOWN on the wire).
		out = append(out, &collections.Endpoint{Address: g.Addr, Port: g.Port, PortName: port.Name, Health: collections.Unknown,
			Meta: collections.NewEndpointMeta(collections.WorkloadMeta{TLSMode: collections.TLSModeIstio, Weight: w}, collections.TopologyMeta{ClusterID: g.Cluster, Network: g.Network}, "", "")})
	}
	return out
}
