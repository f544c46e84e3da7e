package collections

import (
	"maps"
	"slices"
	"time"
)

// Resolution says how clients reach a service's endpoints (istiod: model.Resolution).
type Resolution int

const (
	// ClientSideLB: the client load-balances over the endpoints (ClusterIP services) → EDS.
	ClientSideLB Resolution = iota
	// Passthrough: headless services (clusterIP: None).
	Passthrough
	// Alias: ExternalName services; they get no cluster.
	Alias
	// DNSLB: ServiceEntry resolution DNS; Envoy resolves every endpoint (STRICT_DNS, no EDS).
	DNSLB
	// DNSRoundRobinLB: ServiceEntry resolution DNS_ROUND_ROBIN; Envoy resolves one endpoint
	// (LOGICAL_DNS, no EDS).
	DNSRoundRobinLB
)

// IsDNS reports whether Envoy resolves the service's endpoints itself: its cluster carries them
// inline and it gets no EDS.
func (r Resolution) IsDNS() bool { return r == DNSLB || r == DNSRoundRobinLB }

// Registry is where a service comes from.
type Registry int

const (
	// RegistryKubernetes: a Kubernetes Service.
	RegistryKubernetes Registry = iota
	// RegistryServiceEntry: one host of an Istio ServiceEntry.
	RegistryServiceEntry
)

func (r Registry) String() string {
	if r == RegistryServiceEntry {
		return "ServiceEntry"
	}
	return "Kubernetes"
}

// MarshalText renders the registry by name in JSON dumps.
func (r Registry) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

func (r Resolution) String() string {
	switch r {
	case ClientSideLB:
		return "ClientSideLB"
	case Passthrough:
		return "Passthrough"
	case Alias:
		return "Alias"
	case DNSLB:
		return "DNSLB"
	case DNSRoundRobinLB:
		return "DNSRoundRobinLB"
	}
	return "Unknown"
}

// MarshalText renders the resolution by name in JSON dumps.
func (r Resolution) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// TrafficDistribution is the effective Kubernetes trafficDistribution of a service.
type TrafficDistribution int

const (
	TrafficDistributionAny TrafficDistribution = iota
	// TrafficDistributionPreferSameZone covers both PreferClose and PreferSameZone.
	TrafficDistributionPreferSameZone
	TrafficDistributionPreferSameNode
)

func (t TrafficDistribution) String() string {
	switch t {
	case TrafficDistributionPreferSameZone:
		return "PreferSameZone"
	case TrafficDistributionPreferSameNode:
		return "PreferSameNode"
	}
	return "Any"
}

// MarshalText renders the traffic distribution by name in JSON dumps.
func (t TrafficDistribution) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// ServicePort is one port of a Service.
type ServicePort struct {
	Name       string `json:"name"`
	Port       int32  `json:"port"`
	TargetPort string `json:"targetPort,omitempty"`
	// Protocol is the Kubernetes protocol (TCP, UDP, SCTP).
	Protocol string `json:"protocol"`
	// AppProtocol is spec.ports[].appProtocol, if set.
	AppProtocol string `json:"appProtocol,omitempty"`
}

// HasCluster reports whether the port gets an xDS cluster: UDP ports do not.
func (p ServicePort) HasCluster() bool { return p.Protocol != "UDP" }

// ServiceInfo is the registry's view of a service: a Kubernetes Service, or one host of a
// ServiceEntry. It holds what EDS and CDS need.
type ServiceInfo struct {
	// Name is the Service's name; for a ServiceEntry host, the host (as istiod names it).
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Hostname is <name>.<namespace>.svc.<domain>, or the ServiceEntry host.
	Hostname string   `json:"hostname"`
	Registry Registry `json:"registry"`
	// ServiceEntry is the name of the oldest ServiceEntry of the namespace defining the host, whose
	// settings the service has ("" for a Service).
	ServiceEntry string `json:"serviceEntry,omitempty"`
	// Created is that entry's creation time: of the namespaces defining one host, it orders
	// them where a proxy's own namespace does not decide (PickHostNamespace).
	Created time.Time `json:"created,omitzero"`
	// SharedHost: ServiceEntries of other namespaces define the hostname too. The service's
	// resources are then keyed by its namespace as well (OwnedKey), and each proxy is sent those
	// of the namespace its own namespace and Sidecar pick.
	SharedHost bool `json:"sharedHost,omitempty"`
	// MeshExternal is a ServiceEntry's location MESH_EXTERNAL.
	MeshExternal bool              `json:"meshExternal,omitempty"`
	Ports        []ServicePort     `json:"ports"`
	Resolution   Resolution        `json:"resolution"`
	Labels       map[string]string `json:"labels,omitempty"`
	// Selector is spec.selector (a ServiceEntry's workloadSelector labels); nil for services
	// without a selector.
	Selector map[string]string `json:"selector,omitempty"`
	// ExportTo is the parsed networking.istio.io/exportTo annotation (empty = visible everywhere).
	ExportTo []string `json:"exportTo,omitempty"`
	// TrafficDistribution is resolved from the spec, the Service annotation, then the Namespace annotation.
	TrafficDistribution TrafficDistribution `json:"trafficDistribution"`
	// NodeLocal is internalTrafficPolicy: Local.
	NodeLocal bool `json:"nodeLocal,omitempty"`
	// ClusterLocal: in a multi-cluster mesh, a proxy sees only its own cluster's endpoints.
	ClusterLocal bool `json:"clusterLocal,omitempty"`
	// Cluster is the cluster whose Service this is ("" for a ServiceEntry host).
	Cluster                  string   `json:"cluster,omitempty"`
	PublishNotReadyAddresses bool     `json:"publishNotReadyAddresses,omitempty"`
	ClusterIPs               []string `json:"clusterIPs,omitempty"`
	ExternalName             string   `json:"externalName,omitempty"`
	Type                     string   `json:"type"`
	// PersistentSession is set by the label istio.io/persistent-session (cookie based).
	PersistentSession bool `json:"persistentSession,omitempty"`
	// PersistentSessionHeader is set by the label istio.io/persistent-session-header.
	PersistentSessionHeader bool `json:"persistentSessionHeader,omitempty"`
	// HashKey is the annotation krteds.io/endpoint-hash-key: what each endpoint's ring-hash key
	// is (HashKeyPodName, or a Pod annotation's key; "" for its address, the clients' default).
	HashKey string `json:"hashKey,omitempty"`
}

// ResourceName is the krt key: "<namespace>/<name>", the name of a ServiceEntry host being the
// host (a namespace's entries of one host are one service, as istiod keys them by host and
// namespace; a Kubernetes Service's name has no dot, a ServiceEntry host always has one).
func (s ServiceInfo) ResourceName() string { return ServiceKey(s.Registry, s.Namespace, s.Name) }

// ServiceKey is the key of a service: "<namespace>/<name>", whatever its registry.
func ServiceKey(_ Registry, namespace, name string) string {
	return namespace + "/" + name
}

// Visibility is what decides which proxies see the service.
func (s *ServiceInfo) Visibility() Visibility {
	ports := make([]uint32, len(s.Ports))
	for i, p := range s.Ports {
		ports[i] = uint32(p.Port)
	}
	return Visibility{Namespace: s.Namespace, Hostname: s.Hostname, ExportTo: s.ExportTo, Ports: ports}
}

// PortVisibility is the visibility of a resource of one of the service's ports (a cluster, its
// CLA).
func (s *ServiceInfo) PortVisibility(port int32) Visibility {
	return Visibility{Namespace: s.Namespace, Hostname: s.Hostname, ExportTo: s.ExportTo, Ports: []uint32{uint32(port)}}
}

// SupportsDrainingEndpoints is true when either persistent-session label is set: such services keep
// serving, terminating endpoints as DRAINING.
func (s *ServiceInfo) SupportsDrainingEndpoints() bool {
	return s != nil && (s.PersistentSession || s.PersistentSessionHeader)
}

// PortByName returns the service port with that name, if any.
func (s *ServiceInfo) PortByName(name string) (ServicePort, bool) {
	for _, p := range s.Ports {
		if p.Name == name {
			return p, true
		}
	}
	return ServicePort{}, false
}

// Equals compares every field. Collections hold ServiceInfos by pointer: every collection
// derived from one keeps its inputs, and a pointer is 8 bytes where the value is several hundred.
func (s *ServiceInfo) Equals(o *ServiceInfo) bool {
	return s.Name == o.Name &&
		s.Namespace == o.Namespace &&
		s.Hostname == o.Hostname &&
		s.Registry == o.Registry &&
		s.ServiceEntry == o.ServiceEntry &&
		s.Created.Equal(o.Created) &&
		s.SharedHost == o.SharedHost &&
		s.MeshExternal == o.MeshExternal &&
		s.Resolution == o.Resolution &&
		s.TrafficDistribution == o.TrafficDistribution &&
		s.NodeLocal == o.NodeLocal &&
		s.ClusterLocal == o.ClusterLocal &&
		s.Cluster == o.Cluster &&
		s.PublishNotReadyAddresses == o.PublishNotReadyAddresses &&
		s.ExternalName == o.ExternalName &&
		s.Type == o.Type &&
		s.PersistentSession == o.PersistentSession &&
		s.PersistentSessionHeader == o.PersistentSessionHeader &&
		s.HashKey == o.HashKey &&
		slices.Equal(s.Ports, o.Ports) &&
		slices.Equal(s.ExportTo, o.ExportTo) &&
		slices.Equal(s.ClusterIPs, o.ClusterIPs) &&
		maps.Equal(s.Labels, o.Labels) &&
		maps.Equal(s.Selector, o.Selector) &&
		(s.Selector == nil) == (o.Selector == nil)
}
