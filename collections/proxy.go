package collections

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Proxy types, from the first segment of an Istio node id.
const (
	ProxyTypeSidecar = "sidecar"
	ProxyTypeRouter  = "router"
)

// GeneratorGRPC marks proxyless gRPC clients (node metadata GENERATOR).
const GeneratorGRPC = "grpc"

// ConnectedProxy is what a connected xDS client said about itself, parsed from its Envoy node.
// It is the input the xDS server feeds into the graph; the key is the stream's connection id.
type ConnectedProxy struct {
	// ConnID identifies the stream ("sotw-12", "delta-3").
	ConnID string `json:"connID"`
	// ID is the node id, sidecar~<ip>~<pod>.<ns>~<ns>.svc.<domain>.
	ID   string `json:"id"`
	Type string `json:"type"`
	// IP is the proxy's first IP address, from the node id.
	IP        string            `json:"ip"`
	PodName   string            `json:"podName,omitempty"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels,omitempty"`
	ClusterID string            `json:"clusterID,omitempty"`
	Network   string            `json:"network,omitempty"`
	NodeName  string            `json:"nodeName,omitempty"`
	Generator string            `json:"generator,omitempty"`
	// Locality is node.locality as the proxy declared it.
	Locality Locality `json:"locality"`
}

// ResourceName is the connection id.
func (p ConnectedProxy) ResourceName() string { return p.ConnID }

// Equals compares every field.
func (p ConnectedProxy) Equals(o ConnectedProxy) bool {
	return p.ConnID == o.ConnID && p.ID == o.ID && p.Type == o.Type && p.IP == o.IP && p.PodName == o.PodName &&
		p.Namespace == o.Namespace && p.ClusterID == o.ClusterID && p.Network == o.Network &&
		p.NodeName == o.NodeName && p.Generator == o.Generator && p.Locality == o.Locality &&
		maps.Equal(p.Labels, o.Labels)
}

// NodeMetadata is the part of the Envoy node metadata krteds reads.
type NodeMetadata struct {
	Namespace string
	Labels    map[string]string
	ClusterID string
	Network   string
	NodeName  string
	Generator string
}

// maxNodeIDBytes bounds a node id: a namespace and a pod name are at most 63 and 253 bytes.
const maxNodeIDBytes = 1024

// ParseProxy validates an Istio-style node id and metadata: "<type>~<ip>~<pod>.<ns>~<ns>.svc.<domain>"
// with type sidecar or router and a valid IP. The namespace comes from metadata NAMESPACE, else
// from the id. The error says what is wrong.
func ParseProxy(connID, id string, md NodeMetadata, locality Locality) (ConnectedProxy, error) {
	if len(id) > maxNodeIDBytes {
		return ConnectedProxy{}, fmt.Errorf("node id of %d bytes: longer than %d", len(id), maxNodeIDBytes)
	}
	parts := strings.Split(id, "~")
	if len(parts) != 4 {
		return ConnectedProxy{}, fmt.Errorf("node id %q: want 4 parts separated by '~' (<type>~<ip>~<pod>.<namespace>~<namespace>.svc.<domain>), got %d", id, len(parts))
	}
	typ := parts[0]
	if typ != ProxyTypeSidecar && typ != ProxyTypeRouter {
		return ConnectedProxy{}, fmt.Errorf("node id %q: proxy type %q is neither %q nor %q", id, typ, ProxyTypeSidecar, ProxyTypeRouter)
	}
	ip, err := netip.ParseAddr(parts[1])
	if err != nil {
		return ConnectedProxy{}, fmt.Errorf("node id %q: %q is not an IP address", id, parts[1])
	}
	pod, ns := parts[2], ""
	if i := strings.LastIndex(pod, "."); i >= 0 {
		pod, ns = pod[:i], pod[i+1:]
	}
	if ns == "" {
		if j := strings.Index(parts[3], "."); j > 0 {
			ns = parts[3][:j]
		}
	}
	if md.Namespace != "" {
		ns = md.Namespace
	}
	if ns == "" {
		return ConnectedProxy{}, fmt.Errorf("node id %q: no namespace in the id or in metadata NAMESPACE", id)
	}
	return ConnectedProxy{
		ConnID:    connID,
		ID:        id,
		Type:      typ,
		IP:        ip.String(),
		PodName:   pod,
		Namespace: ns,
		Labels:    md.Labels,
		ClusterID: md.ClusterID,
		Network:   md.Network,
		NodeName:  md.NodeName,
		Generator: md.Generator,
		Locality:  locality,
	}, nil
}

// Proxy is a connected proxy enriched from the registry: when its IP belongs to a known Pod in
// its namespace, labels and locality come from that Pod (and its Node); else from what it declared.
type Proxy struct {
	ConnectedProxy
	// Pod is "<ns>/<name>" of the Pod the proxy runs in, if known.
	Pod string `json:"pod,omitempty"`
	// Labels are the effective labels, augmented with the topology labels.
	EffectiveLabels map[string]string `json:"effectiveLabels,omitempty"`
	Class           ProxyClass        `json:"class"`
	// Sidecar is "<ns>/<name>" of the Sidecar that scopes the proxy, "" for none; SidecarEgress
	// are its egress listeners (nil: everything is imported).
	Sidecar       string           `json:"sidecar,omitempty"`
	SidecarEgress []EgressListener `json:"sidecarEgress,omitempty"`
	// View is what resolving names for the proxy depends on.
	View View `json:"view"`
}

// ResourceName is the connection id.
func (p Proxy) ResourceName() string { return p.ConnID }

// ProxyGroupKeys are the keys of a proxy's class and view (ProxyClass.Key, View.Key).
type ProxyGroupKeys struct {
	ConnID string `json:"connID"`
	Class  string `json:"class"`
	View   string `json:"view"`
}

// ResourceName is the connection id.
func (k ProxyGroupKeys) ResourceName() string { return k.ConnID }

// Equals compares every field.
func (k ProxyGroupKeys) Equals(o ProxyGroupKeys) bool { return k == o }

// GroupShard is one shard of a group of proxies (a class or a view): the group's value as a
// member of the shard has it. Proxies are grouped in two steps, into shards of a group and the
// shards into the group, so that a proxy joining or leaving touches its shard's members only.
type GroupShard[T interface{ Equals(T) bool }] struct {
	// Key is the group's key and the shard's number ("<group>#7").
	Key   string `json:"key"`
	Group string `json:"group"`
	Value T      `json:"value"`
}

// ResourceName is Key.
func (s GroupShard[T]) ResourceName() string { return s.Key }

// Equals compares every field.
func (s GroupShard[T]) Equals(o GroupShard[T]) bool {
	return s.Key == o.Key && s.Group == o.Group && s.Value.Equals(o.Value)
}

// Equals compares every field.
func (p Proxy) Equals(o Proxy) bool {
	return p.ConnectedProxy.Equals(o.ConnectedProxy) && p.Pod == o.Pod && p.Class == o.Class &&
		p.Sidecar == o.Sidecar && slices.EqualFunc(p.SidecarEgress, o.SidecarEgress, EgressListener.Equals) && p.View.Equals(o.View) &&
		maps.Equal(p.EffectiveLabels, o.EffectiveLabels)
}

// ProxyClass holds every proxy dimension a ClusterLoadAssignment may depend on. Proxies with equal
// classes receive the same bytes for every cluster.
type ProxyClass struct {
	Namespace string   `json:"namespace"`
	ClusterID string   `json:"clusterID"`
	Network   string   `json:"network"`
	Locality  Locality `json:"locality"`
	NodeName  string   `json:"nodeName"`
	// Labels are the proxy's own labels (its Pod's, else those it declared, before the topology
	// labels are added) that a failoverPriority may compare, rendered by CanonicalLabels.
	Labels string `json:"labels,omitempty"`
	// Rules are the names of the DestinationRules of the proxy's namespace whose workloadSelector
	// matches its labels, in istiod's order of rules (oldest first, then by name), joined by
	// ",": which rule the proxy gets may depend on them (SelectedRules).
	Rules string `json:"rules,omitempty"`
}

// SelectedRules are Rules as a list (nil when none).
func (c ProxyClass) SelectedRules() []string {
	if c.Rules == "" {
		return nil
	}
	return strings.Split(c.Rules, ",")
}

// ResourceName is the class key.
func (c ProxyClass) ResourceName() string { return c.Key() }

// Key renders every dimension.
func (c ProxyClass) Key() string {
	k := strings.Join([]string{c.Namespace, c.ClusterID, c.Network, c.Locality.String(), c.NodeName}, "~")
	if c.Labels != "" {
		k += "~" + c.Labels
	}
	if c.Rules != "" {
		k += "~dr:" + c.Rules
	}
	return k
}

// FailoverLabels are the names of the labels whose proxy values a failoverPriority may compare
// with the endpoints': a proxy class keeps the proxy's values of these labels only, so proxies
// that differ in other labels share their CLAs.
type FailoverLabels struct {
	// Names are sorted and distinct.
	Names []string `json:"names"`
}

// ResourceName is a constant: there is one set.
func (f FailoverLabels) ResourceName() string { return "failover-labels" }

// Equals compares the names.
func (f FailoverLabels) Equals(o FailoverLabels) bool { return slices.Equal(f.Names, o.Names) }

// Equals compares every field.
func (c ProxyClass) Equals(o ProxyClass) bool { return c == o }

// Resource is one marshalled xDS resource, shared by every proxy it is served to.
type Resource struct {
	Name    string `json:"name"`
	TypeURL string `json:"typeUrl"`
	// Version is a content hash of Body.
	Version uint64 `json:"version"`
	// Body is the deterministic protobuf encoding of the resource.
	Body []byte `json:"-"`
	// Endpoints counts the endpoints in a ClusterLoadAssignment.
	Endpoints int `json:"endpoints,omitempty"`
	// LEDS is a ClusterLoadAssignment's form for clients of LEDS (Config.LEDSThreshold); nil
	// for other resources and for CLAs at or under the threshold.
	LEDS *LEDSForm `json:"leds,omitempty"`
	// Absent: the source has nothing of the name, and this is what it answers for it (an empty
	// ClusterLoadAssignment, as istiod sends for a cluster it does not know).
	Absent bool `json:"absent,omitempty"`
	// Cause is the input change the resource was computed for (a CLA's: its endpoints'), zero
	// when none says when. The first computation of a version gives it.
	Cause Cause `json:"cause"`
}

// LEDSForm is a ClusterLoadAssignment whose localities name LEDS collections instead of listing
// their endpoints, and the collections: each endpoint is a resource of its own
// (envoy.config.endpoint.v3.LbEndpoint) named in its locality's collection.
type LEDSForm struct {
	// CLA is the ClusterLoadAssignment with the collections' names (same name as the plain one).
	CLA         *Resource        `json:"cla"`
	Collections []LEDSCollection `json:"collections"`
}

// LEDSCollection is one locality's endpoints. Name is the glob collection name clients
// subscribe to ("xdstp://.../*"); each member is named in it.
type LEDSCollection struct {
	Name string `json:"name"`
	// Version is a hash of the members' names and versions: it changes when a member does.
	Version uint64      `json:"version"`
	Members []*Resource `json:"members"`
}

// Collection finds a collection by name.
func (f *LEDSForm) Collection(name string) *LEDSCollection {
	for i := range f.Collections {
		if f.Collections[i].Name == name {
			return &f.Collections[i]
		}
	}
	return nil
}

// VersionString is the version as sent on the wire (hexadecimal).
func (r *Resource) VersionString() string { return strconv.FormatUint(r.Version, 16) }

// Visibility is what decides which proxies may see the resources of a service: its namespace,
// hostname and exportTo.
type Visibility struct {
	Namespace string `json:"namespace"`
	Hostname  string `json:"hostname"`
	// ExportTo is the parsed exportTo (empty: everywhere).
	ExportTo []string `json:"exportTo,omitempty"`
	// Ports are the service's ports the resource is of (a cluster's, its CLA's: one; the
	// service's: all of them): a Sidecar's egress listener bound to a port imports the services
	// that have it.
	Ports []uint32 `json:"ports,omitempty"`
}

// Equals compares every field.
func (v Visibility) Equals(o Visibility) bool {
	return v.Namespace == o.Namespace && v.Hostname == o.Hostname && slices.Equal(v.ExportTo, o.ExportTo) && slices.Equal(v.Ports, o.Ports)
}

// ResourceSet is one named xDS resource as the graph serves it: the same bytes for every proxy
// that sees it (Shared), or, for a cluster whose endpoints depend on the proxy, the bytes for
// each proxy class (ByClass, keyed by ProxyClass.Key; classes with equal projections share one
// Resource).
type ResourceSet struct {
	// Key is unique in its collection: the name, or "<namespace>/<name>" for names only proxies of
	// one namespace resolve (a gRPC client's short listener names).
	Key     string `json:"key"`
	Name    string `json:"name"`
	TypeURL string `json:"typeUrl"`
	// Service is "<namespace>/<name>" of the service the resource was built from.
	Service    string     `json:"service,omitempty"`
	Visibility Visibility `json:"visibility"`
	Shared     *Resource  `json:"shared,omitempty"`
	// ByClass holds the resource per proxy class.
	ByClass map[string]*Resource `json:"byClass,omitempty"`
	// Problems are what kept a resource out of the set (it could not be encoded, or is over the
	// size clients accept).
	Problems []Problem `json:"problems,omitempty"`
}

// ResourceName is Key.
func (s ResourceSet) ResourceName() string { return s.Key }

// Cause is the latest input change the set's resources were computed for (zero if none).
func (s *ResourceSet) Cause() Cause {
	var c Cause
	if s.Shared != nil {
		c = s.Shared.Cause
	}
	for _, r := range s.ByClass {
		c = c.Later(r.Cause)
	}
	return c
}

// Equals compares identity, visibility and content versions.
func (s ResourceSet) Equals(o ResourceSet) bool {
	if s.Key != o.Key || s.Name != o.Name || s.TypeURL != o.TypeURL || s.Service != o.Service ||
		!s.Visibility.Equals(o.Visibility) || !sameVersion(s.Shared, o.Shared) || len(s.ByClass) != len(o.ByClass) ||
		!slices.Equal(s.Problems, o.Problems) {
		return false
	}
	for k, r := range s.ByClass {
		if or, ok := o.ByClass[k]; !ok || !sameVersion(r, or) {
			return false
		}
	}
	return true
}

// sameVersion compares resources by content: the version hashes the body; a CLA's LEDS form is
// compared by its own CLA's version, which holds the collections' names (their members are the
// body's endpoints).
func sameVersion(a, b *Resource) bool {
	if a == nil || b == nil {
		return a == b
	}
	if a.Version != b.Version || (a.LEDS == nil) != (b.LEDS == nil) {
		return false
	}
	return a.LEDS == nil || sameVersion(a.LEDS.CLA, b.LEDS.CLA)
}

// For is the resource for proxies of a class; nil when the set has none for it yet.
func (s *ResourceSet) For(classKey string) *Resource {
	if s.Shared != nil {
		return s.Shared
	}
	return s.ByClass[classKey]
}

// View is what resolving a resource name for a proxy depends on: its class and namespace, the
// egress hosts of its Sidecar, and whether it is a proxyless gRPC client. Proxies with equal
// views resolve every name alike.
type View struct {
	Key      string `json:"key"`
	ClassKey string `json:"class"`
	// Namespace is the proxy's namespace.
	Namespace string `json:"namespace"`
	// Egress are the egress listeners of the proxy's Sidecar, nil without one.
	Egress []EgressListener `json:"egress,omitempty"`
	// GRPC is set for proxyless gRPC clients (node metadata GENERATOR=grpc).
	GRPC bool `json:"grpc,omitempty"`
	// Rules are the class's selected DestinationRules (ProxyClass.SelectedRules): a cluster may
	// have a variant for proxies one of them selects.
	Rules []string `json:"rules,omitempty"`
}

// ResourceName is Key.
func (v View) ResourceName() string { return v.Key }

// Equals compares every field.
func (v View) Equals(o View) bool {
	return v.Key == o.Key && v.ClassKey == o.ClassKey && v.Namespace == o.Namespace && v.GRPC == o.GRPC &&
		slices.EqualFunc(v.Egress, o.Egress, EgressListener.Equals) && slices.Equal(v.Rules, o.Rules)
}

// SortedKeys returns the keys of a string set in order.
func SortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
