package collections

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A kept slice holds what the transforms read, drops the rest, shares its condition values,
// names each endpoint's Pod by key, and leaves the decoded slice as it was.
func TestNewSlice(t *testing.T) {
	yes, no := true, false
	node, zone, host := "node-1", "zone-a", "h"
	in := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "foo-abc", Namespace: "ns1", UID: "u1", ResourceVersion: "7",
			Labels:          map[string]string{LabelServiceName: "foo", "other": "x"},
			Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "x"},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Service", Name: "foo"}}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: new(string), Port: new(int32)}},
		Endpoints: []discovery.Endpoint{{
			Addresses:  []string{"10.0.0.1"},
			Conditions: discovery.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no},
			Hostname:   &host, NodeName: &node, Zone: &zone,
			Hints:     &discovery.EndpointHints{ForZones: []discovery.ForZone{{Name: zone}}},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "ns1", Name: "foo-1", UID: "p1", ResourceVersion: "9", APIVersion: "v1"},
		}, {
			Addresses: []string{"10.0.0.2"},
		}, {
			Addresses: []string{"10.0.0.3"},
			TargetRef: &corev1.ObjectReference{Name: "foo-3"}, // no kind, no namespace: a Pod of the slice's
		}, {
			Addresses: []string{"10.0.0.4"},
			TargetRef: &corev1.ObjectReference{Kind: "Node", Name: "n4"},
		}},
	}
	before := in.DeepCopy()
	out := NewSlice(in)
	if !reflect.DeepEqual(in, before) {
		t.Fatal("the argument was changed")
	}
	want := &Slice{
		ObjectMeta:  metav1.ObjectMeta{Name: "foo-abc", Namespace: "ns1"},
		Key:         "ns1/foo-abc",
		Service:     "foo",
		AddressType: discovery.AddressTypeIPv4,
		Ports:       in.Ports,
		Version:     "7", // the trigger annotation "x" is no time: none
		Endpoints: []SliceEndpoint{
			{Addresses: []string{"10.0.0.1"}, Conditions: discovery.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no}, Pod: "ns1/foo-1"},
			{Addresses: []string{"10.0.0.2"}},
			{Addresses: []string{"10.0.0.3"}, Pod: "ns1/foo-3"},
			{Addresses: []string{"10.0.0.4"}, OtherKind: "Node"},
		},
	}
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("kept as\n%+v\nwant\n%+v", out, want)
	}
	if !out.Equals(want) || !out.Equals(out.DeepCopyObject().(*Slice)) {
		t.Fatal("Equals")
	}
	// The EndpointSlice controller's trigger time is kept, as unix ns.
	stamped := in.DeepCopy()
	stamped.Annotations[AnnotationTriggerTime] = "2026-12-05T12:00:00.95Z"
	v1 := NewSlice(stamped)
	if want := time.Date(2026, 12, 5, 12, 0, 0, 950e6, time.UTC).UnixNano(); v1.Trigger != want || v1.Stamped != want {
		t.Fatalf("trigger %d, stamped %d, want %d", v1.Trigger, v1.Stamped, want)
	}
	// The next version carrying the same stamp (no Pod change stamped a new one) has no trigger
	// of its own; one stamped anew has; the same version again (a relist) keeps it.
	stamped.ResourceVersion = "8"
	v2 := NewSlice(stamped)
	v2.Follows(v1)
	if v2.Trigger != 0 || v2.Stamped != v1.Stamped {
		t.Fatalf("a carried stamp: trigger %d, stamped %d", v2.Trigger, v2.Stamped)
	}
	relisted := NewSlice(stamped)
	relisted.Follows(v2)
	if relisted.Trigger != 0 {
		t.Fatalf("the same version relisted: trigger %d", relisted.Trigger)
	}
	stamped.ResourceVersion = "9"
	stamped.Annotations[AnnotationTriggerTime] = "2026-12-05T12:00:05Z"
	v3 := NewSlice(stamped)
	v3.Follows(v2)
	if v3.Trigger != time.Date(2026, 12, 5, 12, 0, 5, 0, time.UTC).UnixNano() {
		t.Fatalf("a new stamp: trigger %d", v3.Trigger)
	}
	again := NewSlice(in)
	if out.Endpoints[0].Conditions.Ready != again.Endpoints[0].Conditions.Ready ||
		out.Endpoints[0].Conditions.Ready == out.Endpoints[0].Conditions.Terminating {
		t.Fatal("condition values are not shared")
	}
	in.Labels[LabelMCSServiceName] = "foo"
	if !NewSlice(in).MCS {
		t.Fatal("a multi-cluster service's slice is not marked")
	}
	if NewSlice(nil) != nil {
		t.Fatal("nil")
	}
}
