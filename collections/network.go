package collections

import (
	"maps"
	"slices"
	"strconv"
)

// Network labels istiod reads on gateway Services.
const (
	// LabelGatewayPort overrides the mTLS port of a network gateway Service.
	LabelGatewayPort = "networking.istio.io/gatewayPort"
	// GatewayMTLSPort is the default mTLS port of a network gateway (istiod's 15443).
	GatewayMTLSPort = 15443
)

// NetworkGateway is an east-west gateway: the address through which proxies of other networks
// reach a network's endpoints (of one cluster, or "" for any).
type NetworkGateway struct {
	Network string `json:"network"`
	Cluster string `json:"cluster"`
	Addr    string `json:"addr"`
	Port    uint32 `json:"port"`
}

// ResourceName is "<network>/<cluster>/<addr>:<port>".
func (g NetworkGateway) ResourceName() string {
	return g.Network + "/" + g.Cluster + "/" + g.Addr + ":" + strconv.Itoa(int(g.Port))
}

// Equals compares every field.
func (g NetworkGateway) Equals(o NetworkGateway) bool { return g == o }

// ClusterGateways are the network gateways one source knows: a cluster's gateway Services, or the
// meshNetworks configuration (Source "meshNetworks").
type ClusterGateways struct {
	Source   string           `json:"source"`
	Gateways []NetworkGateway `json:"gateways"`
}

// ResourceName is the source.
func (c ClusterGateways) ResourceName() string { return c.Source }

// Equals compares every field.
func (c ClusterGateways) Equals(o ClusterGateways) bool {
	return c.Source == o.Source && slices.Equal(c.Gateways, o.Gateways)
}

// NetworkGateways indexes every gateway by network and by network and cluster, each list sorted
// by address then port, with istiod's weight scale factor: the least common multiple of the
// sizes of those lists. Empty: the mesh is one network, and endpoints are sent as they are.
type NetworkGateways struct {
	ByNetwork        map[string][]NetworkGateway `json:"byNetwork,omitempty"`
	ByNetworkCluster map[string][]NetworkGateway `json:"byNetworkCluster,omitempty"`
	ScaleFactor      uint32                      `json:"scaleFactor"`
}

// Enabled reports whether any gateway is known (istiod's IsMultiNetworkEnabled).
func (g *NetworkGateways) Enabled() bool { return g != nil && len(g.ByNetwork) > 0 }

// For returns the gateways of an endpoint's network and cluster, else of its network.
func (g *NetworkGateways) For(network, cluster string) []NetworkGateway {
	if gws := g.ByNetworkCluster[network+"/"+cluster]; len(gws) > 0 {
		return gws
	}
	return g.ByNetwork[network]
}

// Equals compares every field.
func (g NetworkGateways) Equals(o NetworkGateways) bool {
	eq := func(a, b []NetworkGateway) bool { return slices.Equal(a, b) }
	return g.ScaleFactor == o.ScaleFactor && maps.EqualFunc(g.ByNetwork, o.ByNetwork, eq) &&
		maps.EqualFunc(g.ByNetworkCluster, o.ByNetworkCluster, eq)
}

// ResourceName is the singleton's key.
func (g NetworkGateways) ResourceName() string { return "NetworkGateways" }
