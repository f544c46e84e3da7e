package sources

import (
	"testing"

	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
)

// The Reflector's store keeps Pods reduced, follows relists exactly, and drops Pods that turn
// Failed or are deleted (also when the deletion was missed and arrives as a tombstone).
func TestPodStore(t *testing.T) {
	stop := test.NewStop(t)
	synced := make(chan struct{})
	s := &podStore{
		pods:   krt.NewStaticCollection[*collections.Pod](syncedChan(synced), nil, krt.WithStop(stop)),
		clock:  new(collections.InputClock),
		synced: synced,
	}
	keys := func() []string {
		var out []string
		for _, p := range s.pods.List() {
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
			if s.pods.GetKey(k) == nil {
				t.Fatalf("pods %v, want %v", got, want)
			}
		}
	}
	if s.pods.HasSynced() {
		t.Fatal("synced before the first list")
	}
	a, b := fixtures.Pod("ns", "a", "app", "10.0.0.1", "n1"), fixtures.Pod("ns", "b", "app", "10.0.0.2", "n1")
	failed := fixtures.Pod("ns", "f", "app", "10.0.0.3", "n1")
	failed.Status.Phase = corev1.PodFailed
	if err := s.Replace([]any{a, b, failed}, "1"); err != nil {
		t.Fatal(err)
	}
	if !s.pods.HasSynced() {
		t.Fatal("not synced after the first list")
	}
	expect("ns/a", "ns/b")
	if p := *s.pods.GetKey("ns/a"); p.Labels.Value("app") != "app" || p.NodeName != "n1" || !p.Ready {
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
