package collections

import (
	"maps"
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

// NodeLocality is the topology of one Kubernetes Node as its pods inherit it: the locality (and
// its label form), and the default network, so that a pod reads both in one fetch.
type NodeLocality struct {
	Name     string   `json:"name"`
	Locality Locality `json:"locality"`
	// LocalityLabel is Locality in istiod's "region/zone/subzone" form.
	LocalityLabel string `json:"localityLabel"`
	// Network is the default network (the system namespace's topology.istio.io/network label).
	Network string `json:"network"`
}

// ResourceName is the node name.
func (n NodeLocality) ResourceName() string { return n.Name }

// Equals compares name, locality and network.
func (n *NodeLocality) Equals(o *NodeLocality) bool { return sameValue(n, o) }

// EndpointMeta is what an endpoint inherits from its workload (or, without a Pod, from the
// registry alone). It is immutable once built and shared by every endpoint of the pod. Its two
// large parts are shared by content (see Shared): the pods of one workload hold one
// WorkloadMeta, those of one node (or locality) one TopologyMeta. Build it with NewEndpointMeta,
// which never leaves a part nil.
type EndpointMeta struct {
	*WorkloadMeta
	*TopologyMeta
	HostName  string `json:"HostName"`
	SubDomain string `json:"SubDomain"`
	// Annotations are the Pod's (Pod.Annotations): what a Service's endpoint hash key may name.
	Annotations Labels `json:"annotations,omitzero"`
}

// WorkloadMeta is the part of an endpoint's metadata its workload gives: the same for every pod
// of a ReplicaSet.
type WorkloadMeta struct {
	// PodLabels are the pod's own labels, shared with the Pod. Label and AugmentedLabels read
	// them augmented with the topology labels, as istiod's AugmentLabels writes them.
	PodLabels Labels `json:"PodLabels"`
	// ServiceAccount is the SPIFFE identity spiffe://<trust-domain>/ns/<ns>/sa/<sa>, or "".
	ServiceAccount string `json:"ServiceAccount"`
	// TLSMode is the pod's security.istio.io/tlsMode label, default "disabled".
	TLSMode           string `json:"TLSMode"`
	Namespace         string `json:"Namespace"`
	WorkloadName      string `json:"WorkloadName"`
	CanonicalName     string `json:"CanonicalName"`
	CanonicalRevision string `json:"CanonicalRevision"`
	// Weight is a WorkloadEntry's (or ServiceEntry endpoint's) weight; 0 means 1.
	Weight uint32 `json:"Weight,omitempty"`
}

// TopologyMeta is the part of an endpoint's metadata that says where it runs: the same for every
// pod of a node.
type TopologyMeta struct {
	// LocalityLabel is the locality as istiod stores it (node form "r/z/s" always three segments,
	// or the pod label as given).
	LocalityLabel string   `json:"LocalityLabel"`
	Locality      Locality `json:"Locality"`
	ClusterID     string   `json:"ClusterID"`
	Network       string   `json:"Network"`
	NodeName      string   `json:"NodeName"`
}

var (
	workloadMetas Shared[WorkloadMeta]
	topologyMetas Shared[TopologyMeta]
)

// NewEndpointMeta builds an endpoint's metadata from its parts, sharing each with every other
// endpoint's equal part.
func NewEndpointMeta(w WorkloadMeta, t TopologyMeta, hostName, subDomain string) *EndpointMeta {
	return &EndpointMeta{WorkloadMeta: workloadMetas.Get(w), TopologyMeta: topologyMetas.Get(t),
		HostName: hostName, SubDomain: subDomain}
}

// Edit returns a copy of m (nil: empty metadata) changed by f, its parts shared again. f is given private copies of
// the parts: a shared part must never be written in place, every other endpoint holding it
// would change with it.
func (m *EndpointMeta) Edit(f func(*EndpointMeta)) *EndpointMeta {
	c := &EndpointMeta{WorkloadMeta: &WorkloadMeta{}, TopologyMeta: &TopologyMeta{}}
	if m != nil {
		*c.WorkloadMeta, *c.TopologyMeta, c.HostName, c.SubDomain = *m.WorkloadMeta, *m.TopologyMeta, m.HostName, m.SubDomain
		c.Annotations = m.Annotations
	}
	f(c)
	out := NewEndpointMeta(*c.WorkloadMeta, *c.TopologyMeta, c.HostName, c.SubDomain)
	out.Annotations = c.Annotations
	return out
}

// LBWeight is the endpoint's load-balancing weight: Weight, or 1 when unset.
func (m *EndpointMeta) LBWeight() uint32 {
	if m == nil || m.Weight == 0 {
		return 1
	}
	return m.Weight
}

// Label is the endpoint's label k as istiod's augmented labels have it: the topology labels
// (region, zone and subzone when the locality has them, topology.istio.io/cluster, and
// kubernetes.io/hostname when the node is known) override the pod's; topology.istio.io/network
// is the pod's own when set, else the endpoint's network, and is always present.
func (m *EndpointMeta) Label(k string) (string, bool) {
	var v string
	switch k {
	case LabelTopologyRegion:
		v = m.Locality.Region
	case LabelTopologyZone:
		v = m.Locality.Zone
	case LabelTopologySubzone:
		v = m.Locality.Subzone
	case LabelTopologyCluster:
		v = m.ClusterID
	case LabelHostname:
		v = m.NodeName
	case LabelTopologyNetwork:
		if v := m.PodLabels.Value(k); v != "" {
			return v, true
		}
		return m.Network, true
	}
	if v != "" {
		return v, true
	}
	return m.PodLabels.Get(k)
}

// LabelValue is Label's value, "" when absent.
func (m *EndpointMeta) LabelValue(k string) string {
	v, _ := m.Label(k)
	return v
}

// AugmentedLabels is every label Label answers for, as a new map.
func (m *EndpointMeta) AugmentedLabels() map[string]string {
	out := make(map[string]string, m.PodLabels.Len()+6)
	maps.Copy(out, m.PodLabels.Map())
	for _, k := range []string{LabelTopologyRegion, LabelTopologyZone, LabelTopologySubzone,
		LabelTopologyCluster, LabelHostname, LabelTopologyNetwork} {
		if v, ok := m.Label(k); ok {
			out[k] = v
		}
	}
	return out
}

// Equals compares every field; identical pointers (shared parts) compare equal at once.
func (m *EndpointMeta) Equals(o *EndpointMeta) bool {
	if m == o {
		return true
	}
	if m == nil || o == nil {
		return false
	}
	return m.HostName == o.HostName && m.SubDomain == o.SubDomain && m.Annotations.Equal(o.Annotations) &&
		sameValue(m.WorkloadMeta, o.WorkloadMeta) && sameValue(m.TopologyMeta, o.TopologyMeta)
}

// Workload is what krteds knows of one Pod: its identity and topology, and whether it can be
// found by IP (for EndpointSlice entries without a targetRef). Transforms derive it from the Pods
// they fetch; it is not a collection of its own.
type Workload struct {
	// Key is the Pod's key, "<namespace>/<name>".
	Key       string   `json:"key"`
	Name      string   `json:"name"`
	Namespace string   `json:"namespace"`
	IPs       []string `json:"ips,omitempty"`
	// Ready is true for a Running or Pending pod with an IP, not being deleted, whose Ready
	// condition is True: only such pods are found by IP, as in istiod's podsByIP.
	Ready bool `json:"ready"`
	// Cause is the Pod's version as the cause of what is derived from it (Pod.Cause).
	Cause Cause `json:"cause"`
	// HostNetwork pods share the node IP.
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// Meta holds the pod's labels (Meta.PodLabels) with everything endpoints inherit.
	Meta *EndpointMeta `json:"meta"`
}

// ResourceName is "<namespace>/<name>", the Pod's key.
func (w Workload) ResourceName() string { return w.Key }
