package collections

import (
	"maps"
	"slices"
	"strings"
)

// Locality is a region/zone/subzone triple.
type Locality struct {
	Region  string `json:"region,omitempty"`
	Zone    string `json:"zone,omitempty"`
	Subzone string `json:"subzone,omitempty"`
}

// IsEmpty reports whether no part is set.
func (l Locality) IsEmpty() bool { return l == Locality{} }

// String renders "region/zone/subzone" (always three segments, as istiod's LocalityToString),
// or "" when empty.
func (l Locality) String() string {
	if l.IsEmpty() {
		return ""
	}
	return l.Region + "/" + l.Zone + "/" + l.Subzone
}

// ParseLocality parses "region/zone/subzone" (any trailing part may be missing). Dots are
// accepted as separators when no slash is present, as in istiod's SanitizeLocalityLabel.
func ParseLocality(s string) Locality {
	if s == "" {
		return Locality{}
	}
	if !strings.Contains(s, "/") {
		s = strings.ReplaceAll(s, ".", "/")
	}
	parts := strings.SplitN(s, "/", 3)
	var l Locality
	l.Region = parts[0]
	if len(parts) > 1 {
		l.Zone = parts[1]
	}
	if len(parts) > 2 {
		l.Subzone = parts[2]
	}
	return l
}

// NodeLocality is the locality of one Kubernetes Node.
type NodeLocality struct {
	Name     string   `json:"name"`
	Locality Locality `json:"locality"`
}

// ResourceName is the node name.
func (n NodeLocality) ResourceName() string { return n.Name }

// Equals compares name and locality.
func (n NodeLocality) Equals(o NodeLocality) bool { return n == o }

// EndpointMeta is what an endpoint inherits from its workload (or, without a Pod, from the
// registry alone). It is immutable once built and shared by every endpoint of the workload.
type EndpointMeta struct {
	// Labels are the pod labels augmented with the topology labels (region, zone, subzone,
	// cluster, hostname, network), as istiod's AugmentLabels.
	Labels map[string]string `json:"Labels"`
	// ServiceAccount is the SPIFFE identity spiffe://<trust-domain>/ns/<ns>/sa/<sa>, or "".
	ServiceAccount string `json:"ServiceAccount"`
	// TLSMode is the pod's security.istio.io/tlsMode label, default "disabled".
	TLSMode           string `json:"TLSMode"`
	Namespace         string `json:"Namespace"`
	WorkloadName      string `json:"WorkloadName"`
	CanonicalName     string `json:"CanonicalName"`
	CanonicalRevision string `json:"CanonicalRevision"`
	// LocalityLabel is the locality as istiod stores it (node form "r/z/s" always three segments,
	// or the pod label as given).
	LocalityLabel string   `json:"LocalityLabel"`
	Locality      Locality `json:"Locality"`
	ClusterID     string   `json:"ClusterID"`
	Network       string   `json:"Network"`
	NodeName      string   `json:"NodeName"`
	HostName      string   `json:"HostName"`
	SubDomain     string   `json:"SubDomain"`
	// PodTemplateHash / RolloutsHash are kept for local-cluster matching.
	PodTemplateHash string `json:"-"`
	RolloutsHash    string `json:"-"`
}

// Equals compares every field; identical pointers compare equal at once.
func (m *EndpointMeta) Equals(o *EndpointMeta) bool {
	if m == o {
		return true
	}
	if m == nil || o == nil {
		return false
	}
	return m.ServiceAccount == o.ServiceAccount &&
		m.TLSMode == o.TLSMode &&
		m.Namespace == o.Namespace &&
		m.WorkloadName == o.WorkloadName &&
		m.CanonicalName == o.CanonicalName &&
		m.CanonicalRevision == o.CanonicalRevision &&
		m.LocalityLabel == o.LocalityLabel &&
		m.Locality == o.Locality &&
		m.ClusterID == o.ClusterID &&
		m.Network == o.Network &&
		m.NodeName == o.NodeName &&
		m.HostName == o.HostName &&
		m.SubDomain == o.SubDomain &&
		m.PodTemplateHash == o.PodTemplateHash &&
		m.RolloutsHash == o.RolloutsHash &&
		maps.Equal(m.Labels, o.Labels)
}

// Workload is what krteds knows of one Pod: its identity and topology, and whether it can be
// found by IP (for EndpointSlice entries without a targetRef).
type Workload struct {
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	IPs       []string `json:"ips,omitempty"`
	// Ready is true for a Running or Pending pod with an IP, not being deleted, whose Ready
	// condition is True: only such pods are found by IP, as in istiod's podsByIP.
	Ready bool `json:"ready"`
	// HostNetwork pods share the node IP.
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// PodLabels are the pod's own labels, unaugmented.
	PodLabels map[string]string `json:"podLabels,omitempty"`
	Meta      *EndpointMeta     `json:"meta"`
}

// ResourceName is "<namespace>/<name>", the Pod's key.
func (w Workload) ResourceName() string { return w.Namespace + "/" + w.Name }

// Equals compares every field.
func (w Workload) Equals(o Workload) bool {
	return w.Name == o.Name &&
		w.Namespace == o.Namespace &&
		w.Ready == o.Ready &&
		w.HostNetwork == o.HostNetwork &&
		slices.Equal(w.IPs, o.IPs) &&
		maps.Equal(w.PodLabels, o.PodLabels) &&
		w.Meta.Equals(o.Meta)
}
