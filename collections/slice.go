package collections

import (
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ReduceEndpointSlice is an EndpointSlice as krteds keeps it, a new object holding only what its
// transforms read: the name, namespace, labels and identity of the slice, its address type and
// ports, and per endpoint the addresses, the conditions (pointing at shared true and false
// values) and the kind, namespace and name of the target. An endpoint's node, zone, hostname and
// hints, the target's UID and version, and the slice's annotations, owners and managed fields are
// dropped (krteds reads a Pod's topology from the Pod and its Node). Every source reduces slices
// so, as they reduce Pods; the argument is not changed. Nothing may write through the
// conditions' pointers.
func ReduceEndpointSlice(s *discovery.EndpointSlice) *discovery.EndpointSlice {
	if s == nil {
		return nil
	}
	out := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:              s.Name,
			Namespace:         Intern(s.Namespace),
			UID:               s.UID,
			ResourceVersion:   s.ResourceVersion,
			Generation:        s.Generation,
			CreationTimestamp: s.CreationTimestamp,
			DeletionTimestamp: s.DeletionTimestamp,
			Labels:            s.Labels,
		},
		AddressType: s.AddressType,
		Ports:       s.Ports,
		Endpoints:   make([]discovery.Endpoint, len(s.Endpoints)),
	}
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		r := &out.Endpoints[i]
		r.Addresses = e.Addresses
		r.Conditions = discovery.EndpointConditions{Ready: sharedBool(e.Conditions.Ready),
			Serving: sharedBool(e.Conditions.Serving), Terminating: sharedBool(e.Conditions.Terminating)}
		if ref := e.TargetRef; ref != nil {
			r.TargetRef = &corev1.ObjectReference{Kind: Intern(ref.Kind), Namespace: Intern(ref.Namespace), Name: ref.Name}
		}
	}
	return out
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
