package collections

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Slice is an EndpointSlice as krteds keeps it (NewSlice): what the transforms read, in a form
// sized for it. Every source keeps slices so, as they keep Pods as Pod. It is a Kubernetes object
// (krt reports a slice's problems as its status) of which only the name and namespace are set.
// The type metadata is left empty.
type Slice struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	// Key is "<namespace>/<name>".
	Key string `json:"key"`
	// Service is the kubernetes.io/service-name label ("" when missing); MCS is set when the
	// slice carries multicluster.kubernetes.io/service-name (a multi-cluster service's).
	Service string `json:"service,omitempty"`
	MCS     bool   `json:"mcs,omitempty"`
	// Controlled: the EndpointSlice controller writes the slice (its managed-by label), and
	// stamps every version a Pod change caused.
	Controlled  bool                     `json:"controlled,omitempty"`
	AddressType discovery.AddressType    `json:"addressType"`
	Ports       []discovery.EndpointPort `json:"ports,omitempty"`
	Endpoints   []SliceEndpoint          `json:"endpoints,omitempty"`
	// Version is the slice's resourceVersion; Stamped the time (unix ns, 0 if none) the
	// EndpointSlice controller stamped on it (endpoints.kubernetes.io/last-change-trigger-time):
	// the Pod or Service change behind it. Trigger is this version's own change: Stamped, unless
	// the version before carried the same stamp (the controller keeps it when no Pod change
	// stamped a new one: 0), or a manifest file's change; Seen when krteds' source took this
	// version (unix ns; the source sets both).
	Version string `json:"resourceVersion,omitempty"`
	Stamped int64  `json:"stamped,omitempty"`
	Trigger int64  `json:"trigger,omitempty"`
	Seen    int64  `json:"seen,omitempty"`
}

// ControllerName is the EndpointSlice controller's managed-by value.
const ControllerName = "endpointslice-controller.k8s.io"

// AnnotationTriggerTime is the EndpointSlice controller's annotation of the time of the change
// that caused a slice's version.
const AnnotationTriggerTime = "endpoints.kubernetes.io/last-change-trigger-time"

// Cause is the input change behind a derived value: the object (kind, key, resourceVersion),
// when the change that caused it was made (Trigger) and when krteds saw it (Seen), in unix ns.
type Cause struct {
	Kind    string `json:"kind,omitempty"`
	Name    string `json:"name,omitempty"`
	Version string `json:"resourceVersion,omitempty"`
	Trigger int64  `json:"trigger,omitempty"`
	Seen    int64  `json:"seen,omitempty"`
	// TriggerFrom says what the trigger time is: TriggerStamped, TriggerReady or TriggerFile
	// ("" without one).
	TriggerFrom string `json:"triggerFrom,omitempty"`
}

// What a trigger time is.
const (
	// TriggerStamped: the EndpointSlice controller's stamp on the slice.
	TriggerStamped = "EndpointSlice"
	// TriggerReady: a Pod's Ready condition's transition.
	TriggerReady = "Pod"
	// TriggerFile: a manifest file's change.
	TriggerFile = "file"
)

// IsZero reports whether there is no cause.
func (c Cause) IsZero() bool { return c == Cause{} }

// Later is the later of two causes (by Seen).
func (c Cause) Later(o Cause) Cause {
	if o.Seen > c.Seen {
		return o
	}
	return c
}

// Follows records that the slice is the next version of prev (nil: none known): a stamp it
// carries over from prev is no change of its own.
func (s *Slice) Follows(prev *Slice) {
	switch {
	case prev == nil:
	case prev.Version == s.Version:
		s.Trigger = prev.Trigger // the same version again (a relist)
	case s.Stamped != 0 && prev.Stamped == s.Stamped:
		s.Trigger = 0
	}
}

// Cause is the slice's version as the cause of what is derived from it.
func (s *Slice) Cause() Cause {
	c := Cause{Kind: "EndpointSlice", Name: s.Key, Version: s.Version, Trigger: s.Trigger, Seen: s.Seen}
	switch {
	case s.Trigger == 0:
	case s.Stamped != 0:
		c.TriggerFrom = TriggerStamped
	default:
		c.TriggerFrom = TriggerFile
	}
	return c
}

// SliceEndpoint is one endpoint of a Slice.
type SliceEndpoint struct {
	Addresses []string `json:"addresses"`
	// Conditions point at process-wide true and false values; nothing may write through them.
	Conditions discovery.EndpointConditions `json:"conditions"`
	// Pod is the key ("<namespace>/<name>") of the Pod the targetRef names (a targetRef of kind
	// Pod or of no kind; its namespace defaults to the slice's); "" otherwise.
	Pod string `json:"pod,omitempty"`
	// OtherKind is the kind of a targetRef that names something else than a Pod.
	OtherKind string `json:"otherKind,omitempty"`
}

// ResourceName is the slice's key.
func (s *Slice) ResourceName() string { return s.Key }

// DeepCopyObject copies the slice; the addresses, ports and condition values, which nothing
// writes, are shared.
func (s *Slice) DeepCopyObject() runtime.Object {
	out := *s
	out.ObjectMeta = *s.ObjectMeta.DeepCopy()
	out.Endpoints = slices.Clone(s.Endpoints)
	return &out
}

// Equals compares every field (the conditions by value; the name and namespace are the key)
// but Seen: the same version seen again (a relist) is no change.
func (s *Slice) Equals(o *Slice) bool {
	return s.Key == o.Key && s.Service == o.Service && s.MCS == o.MCS && s.Controlled == o.Controlled &&
		s.AddressType == o.AddressType && s.Version == o.Version && s.Stamped == o.Stamped && s.Trigger == o.Trigger &&
		slices.EqualFunc(s.Ports, o.Ports, sameEndpointPort) &&
		slices.EqualFunc(s.Endpoints, o.Endpoints, SliceEndpoint.Equals)
}

// Equals compares every field (the conditions by value).
func (e SliceEndpoint) Equals(o SliceEndpoint) bool {
	return e.Pod == o.Pod && e.OtherKind == o.OtherKind && slices.Equal(e.Addresses, o.Addresses) &&
		sameBool(e.Conditions.Ready, o.Conditions.Ready) && sameBool(e.Conditions.Serving, o.Conditions.Serving) &&
		sameBool(e.Conditions.Terminating, o.Conditions.Terminating)
}

func sameEndpointPort(a, b discovery.EndpointPort) bool {
	return sameValue(a.Name, b.Name) && sameValue(a.Protocol, b.Protocol) && sameValue(a.Port, b.Port) && sameValue(a.AppProtocol, b.AppProtocol)
}

func sameBool(a, b *bool) bool { return sameValue(a, b) }

// NewSlice keeps an EndpointSlice as krteds does: the slice's identity, service labels, address
// type and ports, and per endpoint the addresses, the conditions (pointing at shared true and
// false values) and the Pod its targetRef names. An endpoint's node, zone, hostname and hints,
// the target's UID and version, and the slice's other labels, annotations, owners and managed
// fields are dropped (krteds reads a Pod's topology from the Pod and its Node). The argument is
// not changed; the addresses and ports are shared with it.
func NewSlice(s *discovery.EndpointSlice) *Slice {
	if s == nil {
		return nil
	}
	ns := Intern(s.Namespace)
	key := ns + "/" + s.Name
	out := &Slice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: key[:len(ns)], Name: key[len(ns)+1:]},
		Key:         key,
		Service:     s.Labels[LabelServiceName],
		AddressType: s.AddressType,
		Ports:       s.Ports,
		Endpoints:   make([]SliceEndpoint, len(s.Endpoints)),
		Version:     s.ResourceVersion,
	}
	_, out.MCS = s.Labels[LabelMCSServiceName]
	out.Controlled = s.Labels[discovery.LabelManagedBy] == ControllerName
	if t, err := time.Parse(time.RFC3339Nano, s.Annotations[AnnotationTriggerTime]); err == nil {
		out.Stamped, out.Trigger = t.UnixNano(), t.UnixNano()
	}
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		r := &out.Endpoints[i]
		r.Addresses = e.Addresses
		r.Conditions = discovery.EndpointConditions{Ready: sharedBool(e.Conditions.Ready),
			Serving: sharedBool(e.Conditions.Serving), Terminating: sharedBool(e.Conditions.Terminating)}
		switch ref := e.TargetRef; {
		case ref == nil:
		case IsPodRef(ref):
			ns := ref.Namespace
			if ns == "" {
				ns = s.Namespace
			}
			r.Pod = ns + "/" + ref.Name
		default:
			r.OtherKind = Intern(ref.Kind)
		}
	}
	return out
}

// IsPodRef reports whether a targetRef names a Pod (a kind left empty counts as Pod).
func IsPodRef(ref *corev1.ObjectReference) bool {
	return ref != nil && (ref.Kind == "Pod" || ref.Kind == "")
}

var boolValues = [2]bool{false, true}

// sharedBool points at a process-wide copy of *b (nil stays nil).
func sharedBool(b *bool) *bool {
	if b == nil {
		return nil
	}
	if *b {
		return &boolValues[1]
	}
	return &boolValues[0]
}
