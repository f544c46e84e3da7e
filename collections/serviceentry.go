package collections

import (
	"maps"
	"slices"
	"time"
)

// Istio labels and annotations read from ServiceEntries and WorkloadEntries.
const (
	// AnnotationHealthChecksEnabled makes a WorkloadEntry's health its Healthy condition.
	AnnotationHealthChecksEnabled = "proxy.istio.io/health-checks-enabled"
	// ConditionHealthy is the WorkloadEntry condition a health-checked entry must have True.
	ConditionHealthy = "Healthy"
)

// Reasons for skipping ServiceEntry and WorkloadEntry input.
const (
	ReasonInvalidHost = "invalid_host"
	ReasonUnsupported = "unsupported"
)

// WorkloadEntry is what krteds keeps of a WorkloadEntry (networking.istio.io/v1), or of one
// inline endpoint of a ServiceEntry: an address with named ports and what its endpoints inherit.
type WorkloadEntry struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Address is an IP address, or a hostname (DNSOnly).
	Address string `json:"address"`
	// DNSOnly is set for a hostname address: only DNS-resolved ServiceEntries use the entry.
	DNSOnly bool `json:"dnsOnly,omitempty"`
	// Ports maps service port names to the entry's port numbers.
	Ports map[string]uint32 `json:"ports,omitempty"`
	// Meta holds the labels (metadata labels over spec labels), identity, locality, network and
	// weight.
	Meta *EndpointMeta `json:"meta"`
}

// ResourceName is "<namespace>/<name>".
func (w WorkloadEntry) ResourceName() string { return w.Namespace + "/" + w.Name }

// Equals compares every field.
func (w WorkloadEntry) Equals(o WorkloadEntry) bool {
	return w.Name == o.Name && w.Namespace == o.Namespace && w.Address == o.Address &&
		w.DNSOnly == o.DNSOnly && maps.Equal(w.Ports, o.Ports) && w.Meta.Equals(o.Meta)
}

// ServiceEntry is a converted ServiceEntry: the services its hosts define and where their
// endpoints come from.
type ServiceEntry struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	// Created is the creation time: of the entries defining a host, the oldest defines it.
	Created time.Time `json:"created"`
	// Hosts are the hosts the entry may define.
	Hosts      []string      `json:"hosts"`
	Ports      []ServicePort `json:"ports"`
	Resolution Resolution    `json:"resolution"`
	// MeshExternal is location MESH_EXTERNAL (the default).
	MeshExternal bool              `json:"meshExternal"`
	ExportTo     []string          `json:"exportTo,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	// Selector is the workloadSelector's labels: the entry's endpoints are the Pods and
	// WorkloadEntries of its namespace that carry them. Nil: the inline Endpoints.
	Selector  map[string]string `json:"selector,omitempty"`
	Endpoints []WorkloadEntry   `json:"endpoints,omitempty"`
	// TrafficDistribution from the entry's annotation, then its Namespace's.
	TrafficDistribution TrafficDistribution `json:"trafficDistribution"`
}

// ResourceName is "<namespace>/<name>".
func (s ServiceEntry) ResourceName() string { return s.Namespace + "/" + s.Name }

// Equals compares every field.
func (s ServiceEntry) Equals(o ServiceEntry) bool {
	return s.Name == o.Name && s.Namespace == o.Namespace && s.Created.Equal(o.Created) && s.Resolution == o.Resolution &&
		s.MeshExternal == o.MeshExternal && s.TrafficDistribution == o.TrafficDistribution &&
		slices.Equal(s.Hosts, o.Hosts) && slices.Equal(s.Ports, o.Ports) && slices.Equal(s.ExportTo, o.ExportTo) &&
		maps.Equal(s.Labels, o.Labels) && maps.Equal(s.Selector, o.Selector) && (s.Selector == nil) == (o.Selector == nil) &&
		slices.EqualFunc(s.Endpoints, o.Endpoints, WorkloadEntry.Equals)
}
