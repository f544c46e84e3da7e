package collections

import (
	"maps"
	"slices"
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
)

func (r Resolution) String() string {
	switch r {
	case ClientSideLB:
		return "ClientSideLB"
	case Passthrough:
		return "Passthrough"
	case Alias:
		return "Alias"
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

// ServiceInfo is the registry's view of a Kubernetes Service: what EDS and CDS need.
type ServiceInfo struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Hostname is <name>.<namespace>.svc.<domain>.
	Hostname   string            `json:"hostname"`
	Ports      []ServicePort     `json:"ports"`
	Resolution Resolution        `json:"resolution"`
	Labels     map[string]string `json:"labels,omitempty"`
	// Selector is spec.selector; nil for services without a selector.
	Selector map[string]string `json:"selector,omitempty"`
	// ExportTo is the parsed networking.istio.io/exportTo annotation (empty = visible everywhere).
	ExportTo []string `json:"exportTo,omitempty"`
	// TrafficDistribution is resolved from the spec, the Service annotation, then the Namespace annotation.
	TrafficDistribution TrafficDistribution `json:"trafficDistribution"`
	// NodeLocal is internalTrafficPolicy: Local.
	NodeLocal                bool     `json:"nodeLocal,omitempty"`
	PublishNotReadyAddresses bool     `json:"publishNotReadyAddresses,omitempty"`
	ClusterIPs               []string `json:"clusterIPs,omitempty"`
	ExternalName             string   `json:"externalName,omitempty"`
	Type                     string   `json:"type"`
	// PersistentSession is set by the label istio.io/persistent-session (cookie based).
	PersistentSession bool `json:"persistentSession,omitempty"`
	// PersistentSessionHeader is set by the label istio.io/persistent-session-header.
	PersistentSessionHeader bool `json:"persistentSessionHeader,omitempty"`
}

// ResourceName is the krt key: "<namespace>/<name>".
func (s ServiceInfo) ResourceName() string { return s.Namespace + "/" + s.Name }

// Visibility is what decides which proxies see the service.
func (s *ServiceInfo) Visibility() Visibility {
	return Visibility{Namespace: s.Namespace, Hostname: s.Hostname, ExportTo: s.ExportTo}
}

// SupportsDrainingEndpoints is true when either persistent-session label is set: such services keep
// serving, terminating endpoints as DRAINING.
func (s *ServiceInfo) SupportsDrainingEndpoints() bool {
	return s != nil && (s.PersistentSession || s.PersistentSessionHeader)
}

// PortByNumber returns the service port with that number, if any.
func (s *ServiceInfo) PortByNumber(port int32) (ServicePort, bool) {
	for _, p := range s.Ports {
		if p.Port == port {
			return p, true
		}
	}
	return ServicePort{}, false
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

// Equals compares every field.
func (s ServiceInfo) Equals(o ServiceInfo) bool {
	return s.Name == o.Name &&
		s.Namespace == o.Namespace &&
		s.Hostname == o.Hostname &&
		s.Resolution == o.Resolution &&
		s.TrafficDistribution == o.TrafficDistribution &&
		s.NodeLocal == o.NodeLocal &&
		s.PublishNotReadyAddresses == o.PublishNotReadyAddresses &&
		s.ExternalName == o.ExternalName &&
		s.Type == o.Type &&
		s.PersistentSession == o.PersistentSession &&
		s.PersistentSessionHeader == o.PersistentSessionHeader &&
		slices.Equal(s.Ports, o.Ports) &&
		slices.Equal(s.ExportTo, o.ExportTo) &&
		slices.Equal(s.ClusterIPs, o.ClusterIPs) &&
		maps.Equal(s.Labels, o.Labels) &&
		maps.Equal(s.Selector, o.Selector) &&
		(s.Selector == nil) == (o.Selector == nil)
}
