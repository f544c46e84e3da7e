package sources

import (
	"testing"

	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
)

// The Reflector's store keeps Pods reduced, follows relists exactly, and drops Pods that turn
// Failed or are deleted (also when the deletion was missed and arrives as a tombstone).
func TestPodStore(t *testing.T) {
	stop := test.NewStop(t)
	synced := make(chan struct{})
	s := &reducedStore[*corev1.Pod, collections.Pod]{
		name:   "pods",
		reduce: collections.NewPod,
		out:    krt.NewStaticCollection[*collections.Pod](syncedChan(synced), nil, krt.WithStop(stop)),
		clock:  new(collections.InputClock),
		synced: synced,
	}
	keys := func() []string {
		var out []string
		for _, p := range s.out.List() {
			out = append(out, p.Key)
		}
		return out
	}
	expect := func(want ...string) {
		t.Helper()
		got := keys()
		if len(got) != len(want) {
			t.Fatalf("pods %v, want %v", got, want)
		}
		for _, k := range want {
			if s.out.GetKey(k) == nil {
				t.Fatalf("pods %v, want %v", got, want)
			}
		}
	}
	if s.out.HasSynced() {
		t.Fatal("synced before the first list")
	}
	a, b := fixtures.Pod("ns", "a", "app", "10.0.0.1", "n1"), fixtures.Pod("ns", "b", "app", "10.0.0.2", "n1")
	failed := fixtures.Pod("ns", "f", "app", "10.0.0.3", "n1")
	failed.Status.Phase = corev1.PodFailed
	if err := s.Replace([]any{a, b, failed}, "1"); err != nil {
		t.Fatal(err)
	}
	if !s.out.HasSynced() {
		t.Fatal("not synced after the first list")
	}
	expect("ns/a", "ns/b")
	if p := *s.out.GetKey("ns/a"); p.Labels.Value("app") != "app" || p.NodeName != "n1" || !p.Ready {
		t.Fatalf("reduced pod %+v", p)
	}

	b2 := b.DeepCopy()
	b2.Status.Phase = corev1.PodFailed
	if err := s.Update(b2); err != nil {
		t.Fatal(err)
	}
	expect("ns/a")
	if err := s.Add(b); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: a}); err != nil {
		t.Fatal(err)
	}
	expect("ns/b")
	// A relist that no longer has b and has a again.
	if err := s.Replace([]any{a}, "2"); err != nil {
		t.Fatal(err)
	}
	expect("ns/a")
	if err := s.Add(&corev1.Node{}); err == nil {
		t.Fatal("a Node was accepted as a Pod")
	}
}

// The same store over EndpointSlices keeps each as a collections.Slice.
func TestSliceStore(t *testing.T) {
	stop := test.NewStop(t)
	synced := make(chan struct{})
	s := &reducedStore[*discovery.EndpointSlice, collections.Slice]{
		name:   "slices",
		reduce: collections.NewSlice,
		out:    krt.NewStaticCollection[*collections.Slice](syncedChan(synced), nil, krt.WithStop(stop)),
		clock:  new(collections.InputClock),
		synced: synced,
	}
	a := fixtures.Slice("ns", "a", "svc", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.1", Pod: "p1", Cond: fixtures.Ready})
	b := fixtures.Slice("ns", "b", "svc", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.2", Cond: fixtures.Ready})
	if err := s.Replace([]any{a, b}, "1"); err != nil {
		t.Fatal(err)
	}
	if !s.out.HasSynced() || len(s.out.List()) != 2 {
		t.Fatalf("after the list: synced %v, %d slices", s.out.HasSynced(), len(s.out.List()))
	}
	if got := s.out.GetKey("ns/a"); got == nil || (*got).Service != "svc" || (*got).Endpoints[0].Pod != "ns/p1" {
		t.Fatalf("kept slice %+v", got)
	}
	if err := s.Delete(cache.DeletedFinalStateUnknown{Key: "ns/a", Obj: a}); err != nil {
		t.Fatal(err)
	}
	if s.out.GetKey("ns/a") != nil || s.out.GetKey("ns/b") == nil {
		t.Fatal("the tombstone did not delete a alone")
	}
	if err := s.Update(&corev1.Pod{}); err == nil {
		t.Fatal("a Pod was accepted as an EndpointSlice")
	}
}
