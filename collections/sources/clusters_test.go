package sources

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	"k8s.io/client-go/rest"

	"github.com/krteds/krteds/test/fixtures"
)

func waitClusters(t *testing.T, r *RemoteClusters, want ...string) {
	t.Helper()
	w := fixtures.NewWaker()
	fixtures.WakeOn(t, w, r.Collection())
	w.Await(t, 10*time.Second, fmt.Sprintf("clusters %v", want), func() (bool, string) {
		var got []string
		for _, c := range r.Collection().List() {
			got = append(got, c.ID)
		}
		return len(got) == len(want) && (len(want) == 0 || got[0] == want[0]), fmt.Sprintf("clusters %v", got)
	})
}

// TestRemoteClustersJoinWhenSyncedAndLeave: a remote cluster read from a folder joins once read;
// one whose API server never answers never joins and holds nothing back; a removed cluster
// leaves and its collections stop.
func TestRemoteClustersJoinWhenSyncedAndLeave(t *testing.T) {
	stop := test.NewStop(t)
	r := NewRemoteClusters(krt.NewOptionsBuilder(stop, "", nil), "Kubernetes", nil)
	if err := r.AddManifests("Kubernetes", t.TempDir()); err == nil {
		t.Fatal("a remote cluster may not take the local cluster's ID")
	}
	// An API server that never answers.
	dead, err := kube.NewClient(kube.NewClientConfigForRestConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second}), cluster.ID("dead"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddClient("dead", dead, "test"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(svcYAML("ns1", "svc", 80)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.AddManifests("east", dir); err != nil {
		t.Fatal(err)
	}
	waitClusters(t, r, "east")
	c := *r.Collection().GetKey("east")
	if got := len(c.Inputs.Services.List()); got != 1 {
		t.Fatalf("east has %d services", got)
	}
	// The dead cluster had as long as east to sync; it is still out.
	if r.Collection().GetKey("dead") != nil {
		t.Fatal("an unsynced cluster joined")
	}
	r.Remove("east")
	waitClusters(t, r)
	select {
	case <-c.Stop:
	default:
		t.Fatal("a removed cluster's collections keep running")
	}
	r.Remove("dead")
}

// TestRemoteClusterKeepsServingWhileItRestarts: a cluster started again (a new kubeconfig) keeps
// the one serving until it has synced: a restart that never syncs leaves the old one in place.
func TestRemoteClusterKeepsServingWhileItRestarts(t *testing.T) {
	stop := test.NewStop(t)
	r := NewRemoteClusters(krt.NewOptionsBuilder(stop, "", nil), "Kubernetes", nil)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(svcYAML("ns1", "svc", 80)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.AddManifests("east", dir); err != nil {
		t.Fatal(err)
	}
	waitClusters(t, r, "east")
	first := *r.Collection().GetKey("east")
	dead, err := kube.NewClient(kube.NewClientConfigForRestConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second}), cluster.ID("east"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddClient("east", dead, "test"); err != nil {
		t.Fatal(err)
	}
	// A third start that syncs: when it is in the collection, the restart that never synced had
	// as long, and the first must have served until then.
	dir2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir2, "svc.yaml"), []byte(svcYAML("ns1", "svc", 81)+"---\n"+svcYAML("ns1", "other", 82)), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Stop:
		t.Fatal("the serving cluster stopped when a restart began")
	default:
	}
	if got := r.Collection().GetKey("east"); got == nil || (*got) != first {
		t.Fatal("the serving cluster left the collection when a restart began")
	}
	w := fixtures.NewWaker()
	fixtures.WakeOn(t, w, r.Collection())
	if err := r.AddManifests("east", dir2); err != nil {
		t.Fatal(err)
	}
	w.Await(t, 10*time.Second, "the restarted cluster replaces the serving one", func() (bool, string) {
		c := r.Collection().GetKey("east")
		return c != nil && len((*c).Inputs.Services.List()) == 2, "still the first"
	})
	select {
	case <-first.Stop:
	case <-time.After(5 * time.Second):
		t.Fatal("the replaced cluster's collections keep running")
	}
	r.Remove("east")
	waitClusters(t, r)
}
