package collections

import (
	"net/netip"
	"slices"
	"strings"
)

// HealthStatus of an endpoint, with istiod's numbering (model.HealthStatus), which is also
// Envoy's (core.HealthStatus): the wire value is the number.
type HealthStatus int

const (
	// Unknown is istiod's zero value, the health of the endpoints nothing sets one for: a
	// ServiceEntry's inline endpoints, WorkloadEntries (also where a Service selects them) and
	// the network gateways of the split horizon. It goes on the wire as no health_status at all
	// (UNKNOWN), which clients use as they use HEALTHY unless they check health themselves.
	Unknown     HealthStatus = 0
	Healthy     HealthStatus = 1
	UnHealthy   HealthStatus = 2
	Draining    HealthStatus = 3
	Terminating HealthStatus = 4
)

func (h HealthStatus) String() string {
	switch h {
	case Healthy:
		return "Healthy"
	case UnHealthy:
		return "UnHealthy"
	case Draining:
		return "Draining"
	case Terminating:
		return "Terminating"
	}
	return "Unknown"
}

// rank orders health from best to worst, used to pick between duplicate copies (istiod has no
// such rule: it keeps whichever copy its map order gives, and sends a WorkloadEntry a Service
// selects beside a slice endpoint of the same address). An endpoint known to be ready beats one
// of unknown health, which beats one shutting down or failing its checks; both of the first two
// take requests.
func (h HealthStatus) rank() int {
	switch h {
	case Healthy:
		return 0
	case Unknown:
		return 1
	case Draining:
		return 2
	case UnHealthy:
		return 3
	}
	return 4
}

// Endpoint is one (address, port) of a service, built from one EndpointSlice entry.
type Endpoint struct {
	Address string `json:"address"`
	// Port is the slice port number (the target port on the pod).
	Port uint32 `json:"port"`
	// PortName is the slice port name; it matches the service port of the same name.
	PortName string       `json:"portName"`
	Health   HealthStatus `json:"health"`
	// Slice is the name of the EndpointSlice the endpoint came from.
	Slice string `json:"slice"`
	// Pod is "<ns>/<name>" of the backing Pod, or "" when none is known.
	Pod  string        `json:"pod,omitempty"`
	Meta *EndpointMeta `json:"meta"`
}

// Key identifies an endpoint within a service: address and port name (istiod's dedup key).
func (e Endpoint) Key() string { return e.Address + "|" + e.PortName }

// Equals compares every field (Meta by content).
func (e Endpoint) Equals(o Endpoint) bool {
	return e.Address == o.Address &&
		e.Port == o.Port &&
		e.PortName == o.PortName &&
		e.Health == o.Health &&
		e.Slice == o.Slice &&
		e.Pod == o.Pod &&
		e.Meta.Equals(o.Meta)
}

// SliceEndpoints are the endpoints built from one EndpointSlice.
type SliceEndpoints struct {
	// Namespace and Name of the EndpointSlice.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Service is the owning Service's name (label kubernetes.io/service-name).
	Service   string     `json:"service"`
	Endpoints []Endpoint `json:"endpoints"`
	// PendingPods counts the slice's endpoints left out until the Pod they name exists.
	PendingPods int `json:"pendingPods,omitempty"`
	// Left are the slice's addresses that gave no endpoint, each with the rule that left it out:
	// what krteds explain reports, as the transform decided it.
	Left []LeftOut `json:"left,omitempty"`
	// LeftPorts are the slice's ports that gave no endpoint, each with its rule.
	LeftPorts []LeftPort `json:"leftPorts,omitempty"`
	// Ignored is why the slice gives no endpoint at all (ReasonMCSSlice, ReasonFQDNSlice), ""
	// otherwise.
	Ignored string `json:"ignored,omitempty"`
	// Cause is the slice's version these endpoints were made from.
	Cause Cause `json:"cause"`
}

// LeftPort is one port of a slice that the slice transform made no endpoint on.
type LeftPort struct {
	// Index is the port's index in the slice, Name its name.
	Index  int    `json:"index"`
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// LeftOut is one address of a slice's endpoint that the slice transform made no endpoint of.
type LeftOut struct {
	// Endpoint is the index of the slice's endpoint; Address the address as the slice has it.
	Endpoint int    `json:"endpoint"`
	Address  string `json:"address"`
	// Reason is a Reason* constant (ReasonPodPending for an address waiting for its Pod);
	// Detail says it in words.
	Reason string `json:"reason"`
	Detail string `json:"detail"`
}

// ResourceName is "<namespace>/<slice name>", the slice's key.
func (s SliceEndpoints) ResourceName() string { return s.Namespace + "/" + s.Name }

// ServiceKey is "<namespace>/<service>", the key of the owning ServiceInfo.
func (s SliceEndpoints) ServiceKey() string { return s.Namespace + "/" + s.Service }

// Equals compares every field.
func (s SliceEndpoints) Equals(o SliceEndpoints) bool {
	return s.Namespace == o.Namespace && s.Name == o.Name && s.Service == o.Service && s.PendingPods == o.PendingPods &&
		s.Ignored == o.Ignored && s.Cause == o.Cause && slices.Equal(s.Left, o.Left) && slices.Equal(s.LeftPorts, o.LeftPorts) &&
		slices.EqualFunc(s.Endpoints, o.Endpoints, Endpoint.Equals)
}

// ServiceEndpoints is the merged, de-duplicated endpoint list of one service in one cluster: the
// equivalent of one istiod endpoint shard (hostname, namespace, shard "Kubernetes/<cluster>").
type ServiceEndpoints struct {
	Hostname  string `json:"hostname"`
	Namespace string `json:"namespace"`
	// Name is the Service name.
	Name      string   `json:"name"`
	Registry  Registry `json:"registry"`
	ClusterID string   `json:"clusterID"`
	// Endpoints point at the endpoints of the slices (or entries) they come from, which no stage
	// changes: one stored copy of each endpoint.
	Endpoints []*Endpoint `json:"endpoints"`
	// Dropped are the copies of an (address, port name) the merge left out for a better one.
	Dropped []DroppedCopy `json:"dropped,omitempty"`
	// Cause is the latest input change among those the endpoints were made from (the slice seen
	// last), zero when none says when.
	Cause Cause `json:"cause"`
}

// DroppedCopy is a copy of an endpoint the merge left out, and the copy it kept instead (the
// healthiest, then the lowest slice name, then the lowest port number).
type DroppedCopy struct {
	Address  string       `json:"address"`
	PortName string       `json:"portName"`
	Slice    string       `json:"slice,omitempty"`
	Health   HealthStatus `json:"health"`
	// KeptSlice and KeptHealth are the kept copy's ("" for one of no slice).
	KeptSlice  string       `json:"keptSlice,omitempty"`
	KeptHealth HealthStatus `json:"keptHealth"`
}

// ResourceName is the key of the ServiceInfo it belongs to.
func (s ServiceEndpoints) ResourceName() string { return ServiceKey(s.Registry, s.Namespace, s.Name) }

// Equals compares every field.
func (s ServiceEndpoints) Equals(o ServiceEndpoints) bool {
	return s.Hostname == o.Hostname && s.Namespace == o.Namespace && s.Name == o.Name && s.Registry == o.Registry &&
		s.ClusterID == o.ClusterID && s.Cause == o.Cause && slices.Equal(s.Dropped, o.Dropped) &&
		slices.EqualFunc(s.Endpoints, o.Endpoints, func(a, b *Endpoint) bool { return a == b || a.Equals(*b) })
}

// Better reports whether a should win over b when both carry the same (address, port name): the
// healthiest copy wins, then the lowest slice name, then the lowest port number.
func Better(a, b Endpoint) bool {
	if ra, rb := a.Health.rank(), b.Health.rank(); ra != rb {
		return ra < rb
	}
	if a.Slice != b.Slice {
		return a.Slice < b.Slice
	}
	return a.Port < b.Port
}

// CompareEndpoints is the stable order of endpoints within a service: by address (numerically for
// IPs), then port name, then port.
func CompareEndpoints(a, b *Endpoint) int {
	if a.Address != b.Address {
		if c := CompareAddresses(a.Address, b.Address); c != 0 {
			return c
		}
	}
	if c := strings.Compare(a.PortName, b.PortName); c != 0 {
		return c
	}
	if a.Port != b.Port {
		if a.Port < b.Port {
			return -1
		}
		return 1
	}
	return 0
}

// CompareAddresses orders IPs as netip.Addr.Compare does, before anything else (host names),
// which compare as strings: a total order, so a sort's result never depends on its input's. A
// sort calls it n·log n times: two IPv4 addresses in their canonical spelling (what slices and
// pods carry) are compared without netip's parse.
func CompareAddresses(a, b string) int {
	if va, ok := parseIPv4(a); ok {
		if vb, ok := parseIPv4(b); ok {
			switch {
			case va < vb:
				return -1
			case va > vb:
				return 1
			}
			return 0
		}
	}
	return compareParsed(a, b)
}

// compareParsed is CompareAddresses by netip's parse of both.
func compareParsed(a, b string) int {
	pa, ea := netip.ParseAddr(a)
	pb, eb := netip.ParseAddr(b)
	switch {
	case ea == nil && eb == nil:
		return pa.Compare(pb)
	case ea == nil:
		return -1
	case eb == nil:
		return 1
	}
	return strings.Compare(a, b)
}

// parseIPv4 reads a dotted-quad IPv4 address as netip.ParseAddr accepts it (four decimal fields
// of 0–255, no leading zeros); ok is false for anything else, which the caller parses in full.
func parseIPv4(s string) (v uint32, ok bool) {
	fields, field, digits := 0, uint32(0), 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if digits == 1 && field == 0 {
				return 0, false // a leading zero
			}
			field = field*10 + uint32(c-'0')
			digits++
			if field > 255 {
				return 0, false
			}
		case c == '.' && digits > 0 && fields < 3:
			v = v<<8 | field
			fields, field, digits = fields+1, 0, 0
		default:
			return 0, false
		}
	}
	if fields != 3 || digits == 0 {
		return 0, false
	}
	return v<<8 | field, true
}

// AppendRefs appends pointers to the endpoints of eps to refs (eps must not change after).
func AppendRefs(refs []*Endpoint, eps []Endpoint) []*Endpoint {
	for i := range eps {
		refs = append(refs, &eps[i])
	}
	return refs
}

// MergeRecorded de-duplicates endpoints by (address, port name), keeping the better copy, and
// returns pointers to them in CompareEndpoints order, and the copies it left out, each with the
// one kept. out is a list of pointers the caller owns (AppendRefs): it is sorted in place and the
// result is a prefix of it; the endpoints it points to are not modified.
func MergeRecorded(out []*Endpoint) ([]*Endpoint, []DroppedCopy) {
	// Each IPv4 address is read once, not at each of the sort's n·log n comparisons.
	keyed := make([]keyedEndpoint, len(out))
	for i, e := range out {
		v4, ok := parseIPv4(e.Address)
		keyed[i] = keyedEndpoint{v4: v4, isV4: ok, e: e}
	}
	slices.SortFunc(keyed, func(ka, kb keyedEndpoint) int {
		a, b := ka.e, kb.e
		if ka.isV4 && kb.isV4 && ka.v4 != kb.v4 {
			if ka.v4 < kb.v4 {
				return -1
			}
			return 1
		}
		if c := CompareEndpoints(a, b); c != 0 && !(a.Address == b.Address && a.PortName == b.PortName) {
			return c
		}
		// Same key: better first.
		if Better(*a, *b) {
			return -1
		}
		if Better(*b, *a) {
			return 1
		}
		return 0
	})
	var dropped []DroppedCopy
	n := 0
	for _, k := range keyed {
		e := k.e
		if n > 0 && out[n-1].Address == e.Address && out[n-1].PortName == e.PortName {
			kept := out[n-1]
			dropped = append(dropped, DroppedCopy{Address: e.Address, PortName: e.PortName, Slice: e.Slice, Health: e.Health,
				KeptSlice: kept.Slice, KeptHealth: kept.Health})
			continue
		}
		out[n] = e
		n++
	}
	clear(out[n:cap(out)]) // the dropped copies are not kept alive
	return slices.Clip(out[:n]), dropped
}

// keyedEndpoint is an endpoint with its IPv4 address read, while a merge sorts.
type keyedEndpoint struct {
	v4   uint32
	isV4 bool
	e    *Endpoint
}
