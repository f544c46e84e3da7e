package collections

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A Pod's name and namespace are the parts of its key; a key without a namespace (a Pod made by
// hand) does not panic.
func TestPodNameFromKey(t *testing.T) {
	for key, want := range map[string][2]string{"ns1/a": {"ns1", "a"}, "a": {"", "a"}, "/a": {"", "a"}, "": {"", ""}} {
		p := &Pod{Key: key}
		if got := [2]string{p.Namespace(), p.Name()}; got != want {
			t.Errorf("key %q: namespace, name = %q, want %q", key, got, want)
		}
	}
}

// TestPodFollows: a Pod version whose Ready condition did not transition since the previous one
// (being deleted, relabelled) has no trigger of its own; one that transitioned has; the same
// version again (a relist) keeps what it had.
func TestPodFollows(t *testing.T) {
	v1 := &Pod{Key: "ns/p", Version: "1", Ready: true, ReadySince: 100, Seen: 150}
	v1.Follows(nil)
	if c := v1.Cause(); c.Trigger != 100 || c.TriggerFrom != TriggerReady {
		t.Fatalf("first version: %+v", c)
	}
	v2 := &Pod{Key: "ns/p", Version: "2", Ready: true, ReadySince: 100, Deleting: true, Seen: 200}
	v2.Follows(v1)
	if c := v2.Cause(); c.Trigger != 0 || c.TriggerFrom != "" {
		t.Fatalf("a version that did not change readiness: %+v", c)
	}
	relisted := &Pod{Key: "ns/p", Version: "2", Ready: true, ReadySince: 100, Deleting: true, Seen: 300}
	relisted.Follows(v2)
	if c := relisted.Cause(); c.Trigger != 0 {
		t.Fatalf("the same version relisted: %+v", c)
	}
	v3 := &Pod{Key: "ns/p", Version: "3", Ready: false, ReadySince: 250, Deleting: true, Seen: 260}
	v3.Follows(relisted)
	if c := v3.Cause(); c.Trigger != 250 || c.TriggerFrom != TriggerReady {
		t.Fatalf("a readiness transition: %+v", c)
	}
}

// TestPodAnnotationsAreBounded: a Pod keeps its annotations of at most 256 bytes, and none when
// those hold more than the API server allows one object (a manifests file can hold more).
func TestPodAnnotationsAreBounded(t *testing.T) {
	k := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{
		"short": "v", "long": strings.Repeat("x", MaxAnnotationValueBytes+1)}}}
	if got := NewPod(k).Annotations.Map(); len(got) != 1 || got["short"] != "v" {
		t.Errorf("annotations kept: %v, want only the short one", got)
	}
	for i := 0; i < MaxAnnotationBytes/200+1; i++ {
		k.Annotations[fmt.Sprintf("key-%06d", i)] = strings.Repeat("v", 190)
	}
	if got := NewPod(k).Annotations.Len(); got != 0 {
		t.Errorf("%d annotations kept of a Pod past %d bytes of them, want none", got, MaxAnnotationBytes)
	}
}
