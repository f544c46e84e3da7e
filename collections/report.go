package collections

import (
	"fmt"
	"slices"
	"strconv"
)

// Truncate shortens s to at most n bytes (on a rune boundary), saying how much was cut: what
// krteds does to any text a client or a file gave it before it logs or echoes it.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…(" + strconv.Itoa(len(s)-cut) + " more bytes)"
}

// Reasons for skipping input, used as the metric label of skipped objects.
const (
	ReasonSliceNoServiceName = "slice_without_service_name"
	ReasonInvalidAddress     = "invalid_address"
	ReasonNilPort            = "nil_port"
	ReasonInvalidPort        = "invalid_port"
	ReasonUnknownPortName    = "unknown_port_name"
	ReasonTargetRefKind      = "target_ref_not_pod"
	// ReasonPodPending: a slice endpoint names a Pod that is not (yet) in the Pod collection; it
	// is left out until the Pod arrives (istiod's pending-pod resync). Not a problem of the
	// slice: only a LeftOut.
	ReasonPodPending = "pod_pending"
	// ReasonMCSSlice, ReasonFQDNSlice: a slice of a multi-cluster service, or of addressType
	// FQDN, gives no endpoint (as istiod ignores them); ReasonUDPPort: a UDP port gets no
	// cluster. Decisions, not problems.
	ReasonMCSSlice         = "multi_cluster_service_slice"
	ReasonFQDNSlice        = "fqdn_slice"
	ReasonUDPPort          = "udp_port"
	ReasonInvalidManifest  = "invalid_manifest"
	ReasonInvalidProtocol  = "invalid_protocol"
	ReasonResourceTooLarge = "resource_too_large"
	ReasonMarshalFailed    = "marshal_failed"

	// ReasonAddressFamily: an IPv6 address in an IPv4 EndpointSlice, or the reverse.
	ReasonAddressFamily = "address_family_mismatch"
	// ReasonZonedAddress: an IPv6 address with a zone ("fe80::1%eth0"), which Kubernetes
	// rejects and no other pod can reach.
	ReasonZonedAddress = "zoned_address"
	// ReasonMappedAddress: an IPv4-mapped IPv6 address ("::ffff:10.1.2.3"), which Kubernetes
	// rejects in EndpointSlices of either family.
	ReasonMappedAddress = "ipv4_mapped_address"
)

// Problem describes one piece of input that krteds skipped.
type Problem struct {
	// Kind of the object ("EndpointSlice", "Pod", ...).
	Kind string
	// Object is "<namespace>/<name>" (or "<name>" for cluster-scoped objects).
	Object string
	// Reason is one of the Reason* constants.
	Reason string
	// Detail says what exactly was wrong.
	Detail string
	// Subject, when set, is what the problem is about within the object where Detail holds
	// figures that change with it (a resource's size): problems of equal kind, object, reason
	// and subject are one problem, reported once however the figures move.
	Subject string `json:"subject,omitempty"`
}

// Same reports whether two problems are one: equal, or of one subject whose figures moved.
func (p Problem) Same(o Problem) bool {
	if p.Subject != "" || o.Subject != "" {
		return p.Kind == o.Kind && p.Object == o.Object && p.Reason == o.Reason && p.Subject == o.Subject
	}
	return p == o
}

func (p Problem) String() string {
	return fmt.Sprintf("%s %s: %s: %s", p.Kind, p.Object, p.Reason, p.Detail)
}

// ObjectProblems are the problems krteds currently finds in one input object (or file). A
// collection of them is the graph's record of skipped input: an entry appears when an object is
// found wrong, changes when what is wrong changes, and disappears when the object is fixed or
// removed. Outputs turn the entries into log lines and metrics.
type ObjectProblems struct {
	Kind     string    `json:"kind"`
	Object   string    `json:"object"`
	Problems []Problem `json:"problems"`
}

// ResourceName is "<kind>/<object>".
func (p ObjectProblems) ResourceName() string { return p.Kind + "/" + p.Object }

// Equals compares every field.
func (p ObjectProblems) Equals(o ObjectProblems) bool {
	return p.Kind == o.Kind && p.Object == o.Object && slices.Equal(p.Problems, o.Problems)
}
