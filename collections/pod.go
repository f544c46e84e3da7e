package collections

import (
	"slices"
	"unique"

	corev1 "k8s.io/api/core/v1"
)

// Pod is what krteds keeps of a Kubernetes Pod: the fields its transforms read, and nothing
// else. Every source (informers, manifests, static collections) holds Pods in this form, so a
// Pod costs a few hundred bytes instead of the kilobytes of a decoded object.
type Pod struct {
	// Key is "<namespace>/<name>"; Name and Namespace are its two parts.
	Key       string `json:"key"`
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Labels    Labels `json:"labels"`
	NodeName  string `json:"nodeName,omitempty"`
	// ServiceAccount is the service account's name ("" when not set).
	ServiceAccount string          `json:"serviceAccount,omitempty"`
	IPs            []string        `json:"ips,omitempty"`
	Phase          corev1.PodPhase `json:"phase"`
	// Ready is the Ready condition being True.
	Ready bool `json:"ready"`
	// Deleting is set once the Pod has a deletion timestamp.
	Deleting    bool `json:"deleting,omitempty"`
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// Generated is set for a Pod named from a generateName (made by a controller).
	Generated bool `json:"generated,omitempty"`
	// Controller is the Pod's controlling owner, if any.
	Controller PodOwner `json:"controller,omitzero"`
	// Hostname and Subdomain are the Pod's spec fields (DNS names of StatefulSet pods).
	Hostname  string `json:"hostname,omitempty"`
	Subdomain string `json:"subdomain,omitempty"`
	// Ports are the named TCP container ports, the first of each name (istiod's getPortMap):
	// what a ServiceEntry selecting the Pod maps its port names to.
	Ports []NamedPort `json:"ports,omitempty"`
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

// Equals compares every field.
func (p *Pod) Equals(o *Pod) bool {
	return p.Key == o.Key && p.Name == o.Name && p.Namespace == o.Namespace &&
		p.NodeName == o.NodeName && p.ServiceAccount == o.ServiceAccount &&
		p.Phase == o.Phase && p.Ready == o.Ready && p.Deleting == o.Deleting &&
		p.HostNetwork == o.HostNetwork && p.Generated == o.Generated && p.Controller == o.Controller &&
		p.Hostname == o.Hostname && p.Subdomain == o.Subdomain &&
		slices.Equal(p.Ports, o.Ports) && slices.Equal(p.IPs, o.IPs) && p.Labels.Equal(o.Labels)
}

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
		Namespace:      key[:len(ns)],
		Name:           key[len(ns)+1:],
		Labels:         InternLabels(k.Labels),
		NodeName:       Intern(k.Spec.NodeName),
		ServiceAccount: Intern(k.Spec.ServiceAccountName),
		Phase:          corev1.PodPhase(Intern(string(k.Status.Phase))),
		Deleting:       k.DeletionTimestamp != nil,
		HostNetwork:    k.Spec.HostNetwork,
		Generated:      k.GenerateName != "",
		Hostname:       k.Spec.Hostname,
		Subdomain:      k.Spec.Subdomain,
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
	for _, ref := range k.OwnerReferences {
		if ref.Controller != nil && *ref.Controller {
			p.Controller = PodOwner{Kind: Intern(ref.Kind), Name: Intern(ref.Name)}
			break
		}
	}
	return p
}
