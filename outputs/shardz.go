package outputs

import (
	"cmp"
	"slices"
	"strings"

	"istio.io/istio/pkg/config/kube"
	"istio.io/istio/pkg/config/protocol"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
)

// istioEndpoint is istiod's IstioEndpoint as /debug/endpointShardz renders it (Go field names).
type istioEndpoint struct {
	Labels                 map[string]string
	Addresses              []string
	ServicePortName        string
	LegacyClusterPortKey   int
	ServiceAccount         string
	Network                string
	Locality               istioLocality
	EndpointPort           uint32
	LbWeight               uint32
	TLSMode                string
	Namespace              string
	WorkloadName           string
	HostName               string
	SubDomain              string
	HealthStatus           int
	SendUnhealthyEndpoints bool
	NodeName               string
}

type istioLocality struct {
	Label     string
	ClusterID string
}

type endpointShards struct {
	Shards          map[string][]istioEndpoint
	ServiceAccounts map[string]struct{}
}

// EndpointShardz renders service endpoint shards in istiod's /debug/endpointShardz shape:
// hostname → namespace → {Shards: {"Kubernetes/<cluster>": [...]}, ServiceAccounts}.
// Services without endpoints are left out, as istiod drops empty shards.
func EndpointShardz(all []collections.ServiceEndpoints) map[string]map[string]endpointShards {
	out := map[string]map[string]endpointShards{}
	for _, se := range all {
		if len(se.Endpoints) == 0 {
			continue
		}
		// istiod sends unhealthy endpoints by default (PILOT_AUTO_SEND_UNHEALTHY_ENDPOINTS=true).
		sendUnhealthy := true
		shards := map[string][]istioEndpoint{}
		sas := map[string]struct{}{}
		for _, e := range se.Endpoints {
			m := e.Meta
			if m.ServiceAccount != "" {
				sas[m.ServiceAccount] = struct{}{}
			}
			// One shard per registry and cluster, as istiod keys them.
			shard := shardProvider(se.Registry) + "/" + m.ClusterID
			shards[shard] = append(shards[shard], istioEndpoint{
				Labels:                 m.AugmentedLabels(),
				Addresses:              []string{e.Address},
				ServicePortName:        e.PortName,
				ServiceAccount:         m.ServiceAccount,
				Network:                m.Network,
				Locality:               istioLocality{Label: m.LocalityLabel, ClusterID: m.ClusterID},
				EndpointPort:           e.Port,
				TLSMode:                m.TLSMode,
				Namespace:              m.Namespace,
				WorkloadName:           m.WorkloadName,
				HostName:               m.HostName,
				SubDomain:              m.SubDomain,
				HealthStatus:           int(e.Health),
				SendUnhealthyEndpoints: sendUnhealthy,
				NodeName:               m.NodeName,
			})
		}
		if out[se.Hostname] == nil {
			out[se.Hostname] = map[string]endpointShards{}
		}
		out[se.Hostname][se.Namespace] = endpointShards{Shards: shards, ServiceAccounts: sas}
	}
	return out
}

// shardProvider is istiod's registry provider name: ServiceEntries are "External".
func shardProvider(r collections.Registry) string {
	if r == collections.RegistryServiceEntry {
		return "External"
	}
	return "Kubernetes"
}

// registryService is istiod's model.Service as /debug/registryz renders it.
type registryService struct {
	Attributes      registryAttributes `json:"Attributes"`
	Ports           []registryPort     `json:"ports"`
	ServiceAccounts []string           `json:"serviceAccounts,omitempty"`
	ClusterVIPs     registryVIPs       `json:"clusterVIPs"`
	DefaultAddress  string             `json:"defaultAddress"`
	Hostname        string             `json:"hostname"`
	Resolution      int                `json:"Resolution"`
	MeshExternal    bool               `json:"MeshExternal"`
}

type registryAttributes struct {
	ServiceRegistry          string            `json:"ServiceRegistry"`
	Name                     string            `json:"Name"`
	Namespace                string            `json:"Namespace"`
	Labels                   map[string]string `json:"Labels"`
	ExportTo                 []string          `json:"ExportTo"`
	LabelSelectors           map[string]string `json:"LabelSelectors"`
	ClusterExternalAddresses any               `json:"ClusterExternalAddresses"`
	Type                     string            `json:"Type"`
	ExternalName             string            `json:"ExternalName"`
	NodeLocal                bool              `json:"NodeLocal"`
	PublishNotReadyAddresses bool              `json:"PublishNotReadyAddresses"`
	TrafficDistribution      string            `json:"TrafficDistribution"`
}

type registryPort struct {
	Name     string `json:"name,omitempty"`
	Port     int32  `json:"port"`
	Protocol string `json:"protocol,omitempty"`
}

type registryVIPs struct {
	Addresses map[string][]string `json:"Addresses"`
}

// Registryz renders services in istiod's /debug/registryz shape, sorted by hostname, then
// namespace.
func Registryz(svcs []*collections.ServiceInfo, clusterID string) []registryService {
	out := make([]registryService, 0, len(svcs))
	for _, s := range svcs {
		ports := make([]registryPort, 0, len(s.Ports))
		for _, p := range s.Ports {
			ports = append(ports, registryPort{Name: p.Name, Port: p.Port, Protocol: istioProtocol(s.Registry, p)})
		}
		addr := "0.0.0.0"
		if len(s.ClusterIPs) > 0 && s.ClusterIPs[0] != "None" {
			addr = s.ClusterIPs[0]
		}
		// istiod's Resolution numbering: ClientSideLB 0, DNSLB 1, Passthrough 2, DNSRoundRobinLB 3,
		// Alias 4.
		res := map[collections.Resolution]int{collections.ClientSideLB: 0, collections.DNSLB: 1, collections.Passthrough: 2,
			collections.DNSRoundRobinLB: 3, collections.Alias: 4}[s.Resolution]
		out = append(out, registryService{
			Attributes: registryAttributes{
				ServiceRegistry: shardProvider(s.Registry), Name: s.Name, Namespace: s.Namespace, Labels: s.Labels,
				ExportTo: s.ExportTo, LabelSelectors: s.Selector, Type: s.Type, ExternalName: s.ExternalName,
				NodeLocal: s.NodeLocal, PublishNotReadyAddresses: s.PublishNotReadyAddresses,
				TrafficDistribution: s.TrafficDistribution.String(),
			},
			Ports:          ports,
			ClusterVIPs:    registryVIPs{Addresses: map[string][]string{clusterID: s.ClusterIPs}},
			DefaultAddress: addr,
			Hostname:       s.Hostname,
			Resolution:     res,
			MeshExternal:   s.MeshExternal,
		})
	}
	// A hostname ServiceEntries of several namespaces define is one service per namespace.
	slices.SortFunc(out, func(a, b registryService) int {
		return cmp.Or(strings.Compare(a.Hostname, b.Hostname), strings.Compare(a.Attributes.Namespace, b.Attributes.Namespace))
	})
	return out
}

// istioProtocol is the protocol istiod gives a port (HTTP, GRPC, TCP, …): a Service's from its
// name, appProtocol and protocol (kube.ConvertProtocol), a ServiceEntry's as written.
func istioProtocol(r collections.Registry, p collections.ServicePort) string {
	if r == collections.RegistryServiceEntry {
		if p.Protocol == string(corev1.ProtocolUDP) {
			return string(protocol.UDP)
		}
		return string(protocol.Parse(p.AppProtocol))
	}
	var app *string
	if p.AppProtocol != "" {
		app = &p.AppProtocol
	}
	return string(kube.ConvertProtocol(p.Port, p.Name, corev1.Protocol(p.Protocol), app))
}
