package collections

import (
	"maps"
	"slices"
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
)

// Pod is what krteds keeps of a Kubernetes Pod: the fields its transforms read, and nothing
// else. Every source (informers, manifests, static collections) holds Pods in this form, so a
// Pod costs a few hundred bytes instead of the kilobytes of a decoded object.
type Pod struct {
	// Key is "<namespace>/<name>" (Namespace and Name return its two parts).
	Key      string `json:"key"`
	Labels   Labels `json:"labels"`
	NodeName string `json:"nodeName,omitempty"`
	// ServiceAccount is the service account's name ("" when not set).
	ServiceAccount string          `json:"serviceAccount,omitempty"`
	IPs            []string        `json:"ips,omitempty"`
	Phase          corev1.PodPhase `json:"phase"`
	// Ready is the Ready condition being True; ReadySince the condition's lastTransitionTime
	// (unix ns, 0 if none): when the Pod last became ready or not ready. Equals ignores it (it
	// changes with Ready).
	Ready      bool  `json:"ready"`
	ReadySince int64 `json:"readySince,omitempty"`
	// Version is the Pod's resourceVersion; Seen when krteds' source took it (unix ns; the source
	// sets it). A version that changes nothing else here is no change (Equals ignores both).
	Version string `json:"resourceVersion,omitempty"`
	Seen    int64  `json:"seen,omitempty"`
	// ReadyCarried is set on a version whose Ready condition did not transition since the
	// previous version krteds saw: ReadySince is that version's, not a change of this one's
	// (Equals ignores it).
	ReadyCarried bool `json:"readyCarried,omitempty"`
	// Deleting is set once the Pod has a deletion timestamp.
	Deleting    bool `json:"deleting,omitempty"`
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// Generated is set for a Pod named from a generateName (made by a controller).
	Generated bool `json:"generated,omitempty"`
	// Controller is the Pod's controlling owner (nil: none), one value shared by the Pods of an
	// owner.
	Controller *PodOwner `json:"controller,omitempty"`
	// DNS holds the Pod's spec hostname and subdomain (DNS names of StatefulSet pods); nil when
	// both are empty, as for most Pods.
	DNS *PodDNS `json:"dns,omitempty"`
	// Ports are the named TCP container ports, the first of each name (istiod's getPortMap):
	// what a ServiceEntry selecting the Pod maps its port names to.
	Ports []NamedPort `json:"ports,omitempty"`
	// Annotations are the Pod's annotations whose values are at most MaxAnnotationValueBytes
	// long (what a Service's endpoint hash key may name), shared by content like Labels.
	Annotations Labels `json:"annotations,omitzero"`
}

// Namespace is the first part of the key ("" for a key without one).
func (p *Pod) Namespace() string { return p.Key[:max(0, strings.IndexByte(p.Key, '/'))] }

// Name is the second part of the key (the whole key when it has no namespace).
func (p *Pod) Name() string { return p.Key[strings.IndexByte(p.Key, '/')+1:] }

// PodDNS is a Pod's spec hostname and subdomain.
type PodDNS struct {
	Hostname  string `json:"hostname,omitempty"`
	Subdomain string `json:"subdomain,omitempty"`
}

// Hostname is the Pod's spec hostname ("" when not set).
func (p *Pod) Hostname() string {
	if p.DNS == nil {
		return ""
	}
	return p.DNS.Hostname
}

// Subdomain is the Pod's spec subdomain ("" when not set).
func (p *Pod) Subdomain() string {
	if p.DNS == nil {
		return ""
	}
	return p.DNS.Subdomain
}

// NamedPort is a port number by name.
type NamedPort struct {
	Name string `json:"name"`
	Port uint32 `json:"port"`
}

// Port returns the number of the named port (0 when the Pod has no port of that name).
func (p *Pod) Port(name string) uint32 {
	for _, np := range p.Ports {
		if np.Name == name {
			return np.Port
		}
	}
	return 0
}

// PodOwner is a controlling owner reference.
type PodOwner struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// ResourceName is "<namespace>/<name>".
func (p Pod) ResourceName() string { return p.Key }

// Equals compares every field (the owner and DNS names by value).
func (p *Pod) Equals(o *Pod) bool {
	return p.Key == o.Key &&
		p.NodeName == o.NodeName && p.ServiceAccount == o.ServiceAccount &&
		p.Phase == o.Phase && p.Ready == o.Ready && p.Deleting == o.Deleting &&
		p.HostNetwork == o.HostNetwork && p.Generated == o.Generated && sameValue(p.Controller, o.Controller) &&
		sameValue(p.DNS, o.DNS) &&
		slices.Equal(p.Ports, o.Ports) && slices.Equal(p.IPs, o.IPs) && p.Labels.Equal(o.Labels) &&
		p.Annotations.Equal(o.Annotations)
}

// podOwners holds each controlling owner once.
var podOwners Shared[PodOwner]

// Intern returns the canonical copy of s: strings that many objects repeat (namespaces, nodes,
// service accounts, owners, identities) are held once.
func Intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// NewPod reduces a Kubernetes Pod to what krteds keeps. Failed Pods give nil: istiod ignores
// them, and so do the informers (their field selector) and every other source.
func NewPod(k *corev1.Pod) *Pod {
	if k == nil || k.Status.Phase == corev1.PodFailed {
		return nil
	}
	ns := Intern(k.Namespace)
	key := ns + "/" + k.Name
	p := &Pod{
		Key:            key,
		Labels:         InternLabels(k.Labels),
		NodeName:       Intern(k.Spec.NodeName),
		ServiceAccount: Intern(k.Spec.ServiceAccountName),
		Phase:          corev1.PodPhase(Intern(string(k.Status.Phase))),
		Deleting:       k.DeletionTimestamp != nil,
		Version:        k.ResourceVersion,
		HostNetwork:    k.Spec.HostNetwork,
		Generated:      k.GenerateName != "",
	}
	if k.Spec.Hostname != "" || k.Spec.Subdomain != "" {
		p.DNS = &PodDNS{Hostname: k.Spec.Hostname, Subdomain: k.Spec.Subdomain}
	}
	for _, ip := range k.Status.PodIPs {
		if ip.IP != "" {
			p.IPs = append(p.IPs, ip.IP)
		}
	}
	if len(p.IPs) == 0 && k.Status.PodIP != "" {
		p.IPs = []string{k.Status.PodIP}
	}
	p.IPs = slices.Clip(p.IPs)
	for _, c := range k.Status.Conditions {
		if c.Type == corev1.PodReady {
			p.Ready = c.Status == corev1.ConditionTrue
			if !c.LastTransitionTime.IsZero() {
				p.ReadySince = c.LastTransitionTime.UnixNano()
			}
			break
		}
	}
	for _, c := range k.Spec.Containers {
		for _, cp := range c.Ports {
			// An unset protocol is TCP (the API server defaults it; manifests may leave it out).
			if cp.Name == "" || (cp.Protocol != "" && cp.Protocol != corev1.ProtocolTCP) || p.Port(cp.Name) != 0 {
				continue
			}
			p.Ports = append(p.Ports, NamedPort{Name: Intern(cp.Name), Port: uint32(cp.ContainerPort)})
		}
	}
	p.Ports = slices.Clip(p.Ports)
	p.Annotations = InternLabels(shortAnnotations(k.Annotations))
	for _, ref := range k.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			p.Controller = podOwners.Get(PodOwner{Kind: ref.Kind, Name: ref.Name})
			break
		}
	}
	return p
}

// shortAnnotations is a without the annotations whose values are longer than
// MaxAnnotationValueBytes (a itself when none is); nil when those left hold more than
// MaxAnnotationBytes.
func shortAnnotations(a map[string]string) map[string]string {
	for _, v := range a {
		if len(v) > MaxAnnotationValueBytes {
			a = maps.Clone(a)
			maps.DeleteFunc(a, func(_, v string) bool { return len(v) > MaxAnnotationValueBytes })
			break
		}
	}
	n := 0
	for k, v := range a {
		if n += len(k) + len(v); n > MaxAnnotationBytes {
			return nil
		}
	}
	return a
}

// Follows records that the Pod is the next version of prev (nil: none known): a Ready condition
// that did not transition since prev (a Pod that is being deleted, or relabelled) is no change of
// its readiness, and the version has no trigger of its own.
func (p *Pod) Follows(prev *Pod) {
	switch {
	case prev == nil:
	case prev.Version == p.Version:
		p.ReadyCarried = prev.ReadyCarried // the same version again (a relist)
	case p.ReadySince == prev.ReadySince:
		p.ReadyCarried = true
	}
}

// Cause is the Pod's version as the cause of what is derived from it: when it last became ready
// or not (its trigger), and when krteds saw it.
func (p *Pod) Cause() Cause {
	c := Cause{Kind: "Pod", Name: p.Key, Version: p.Version, Trigger: p.ReadySince, Seen: p.Seen}
	if p.ReadyCarried {
		c.Trigger = 0
	}
	if c.Trigger != 0 {
		c.TriggerFrom = TriggerReady
	}
	return c
}
