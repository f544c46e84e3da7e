package registry

import (
	"fmt"
	"testing"

	kubelabels "istio.io/istio/pkg/kube/labels"
	"istio.io/istio/pkg/test"

	"github.com/google/go-cmp/cmp"
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
)

func workloadOf(t *testing.T, pod *corev1.Pod, objs ...any) *collections.Workload {
	t.Helper()
	return workloadFn(collections.DefaultConfig(), StaticWorkloadInputs(test.NewStop(t), objs...))(pod)
}

func TestWorkloadFacts(t *testing.T) {
	pod := fixtures.Pod("ns1", "foo-abc12-x1", "foo", "10.1.0.1", "n1")
	pod.Labels["security.istio.io/tlsMode"] = "istio"
	pod.Labels["service.istio.io/canonical-name"] = "foo-canon"
	w := workloadOf(t, pod, fixtures.ZoneNode("n1", "r1", "z1"))
	want := &collections.Workload{
		Key: "ns1/foo-abc12-x1", Name: "foo-abc12-x1", Namespace: "ns1", IPs: []string{"10.1.0.1"}, Ready: true,
		Cause: collections.Cause{Kind: "Pod", Name: "ns1/foo-abc12-x1"},
		Meta: collections.NewEndpointMeta(
			collections.WorkloadMeta{
				PodLabels:         collections.InternLabels(pod.Labels),
				ServiceAccount:    "spiffe://cluster.local/ns/ns1/sa/foo-sa",
				TLSMode:           "istio",
				Namespace:         "ns1",
				WorkloadName:      "foo",
				CanonicalName:     "foo-canon",
				CanonicalRevision: "",
			},
			collections.TopologyMeta{
				LocalityLabel: "r1/z1/",
				Locality:      collections.Locality{Region: "r1", Zone: "z1"},
				ClusterID:     "Kubernetes",
				NodeName:      "n1",
			},
			"", ""),
	}
	if diff := cmp.Diff(want, w); diff != "" {
		t.Fatalf("workload (-want +got):\n%s", diff)
	}
	// The labels endpoints carry: the pod's, augmented with the topology labels as istiod's.
	augmented := map[string]string{
		"app": "foo", "pod-template-hash": "abc12", "security.istio.io/tlsMode": "istio",
		"service.istio.io/canonical-name": "foo-canon",
		"topology.kubernetes.io/region":   "r1", "topology.kubernetes.io/zone": "z1",
		"topology.istio.io/cluster": "Kubernetes", "kubernetes.io/hostname": "n1",
		"topology.istio.io/network": "",
	}
	if diff := cmp.Diff(augmented, w.Meta.AugmentedLabels()); diff != "" {
		t.Fatalf("augmented labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(augmented, AugmentLabels(pod.Labels, "Kubernetes", w.Meta.Locality, "n1", "")); diff != "" {
		t.Fatalf("AugmentLabels (-want +got):\n%s", diff)
	}
}

func TestWorkloadRules(t *testing.T) {
	node := fixtures.ZoneNode("n1", "r1", "z1")
	cases := []struct {
		name  string
		mut   func(p *corev1.Pod)
		objs  []any
		check func(t *testing.T, w *collections.Workload)
	}{
		{name: "failed pod gives nothing", mut: func(p *corev1.Pod) { p.Status.Phase = corev1.PodFailed },
			check: func(t *testing.T, w *collections.Workload) {
				if w != nil {
					t.Fatalf("want nil, got %+v", w)
				}
			}},
		{name: "tlsMode defaults to disabled", check: func(t *testing.T, w *collections.Workload) {
			if w.Meta.TLSMode != "disabled" {
				t.Fatalf("tlsMode %q", w.Meta.TLSMode)
			}
		}},
		{name: "tlsMode passes any value through", mut: func(p *corev1.Pod) { p.Labels["security.istio.io/tlsMode"] = "weird" },
			check: func(t *testing.T, w *collections.Workload) {
				if w.Meta.TLSMode != "weird" {
					t.Fatalf("tlsMode %q", w.Meta.TLSMode)
				}
			}},
		{name: "pod locality label wins over node, kept as given, dots become slashes",
			mut:  func(p *corev1.Pod) { p.Labels["istio-locality"] = "rx.zx" },
			objs: []any{node},
			check: func(t *testing.T, w *collections.Workload) {
				if w.Meta.LocalityLabel != "rx/zx" || w.Meta.Locality != (collections.Locality{Region: "rx", Zone: "zx"}) {
					t.Fatalf("locality %q %+v", w.Meta.LocalityLabel, w.Meta.Locality)
				}
				if w.Meta.LabelValue("topology.kubernetes.io/zone") != "zx" {
					t.Fatalf("labels %v", w.Meta.AugmentedLabels())
				}
			}},
		{name: "topology.istio.io/locality wins over istio-locality",
			mut: func(p *corev1.Pod) {
				p.Labels["istio-locality"] = "a.b"
				p.Labels["topology.istio.io/locality"] = "c.d.e"
			},
			check: func(t *testing.T, w *collections.Workload) {
				if w.Meta.LocalityLabel != "c/d/e" {
					t.Fatalf("locality %q", w.Meta.LocalityLabel)
				}
			}},
		{name: "missing node gives empty locality", check: func(t *testing.T, w *collections.Workload) {
			if w.Meta.LocalityLabel != "" || !w.Meta.Locality.IsEmpty() {
				t.Fatalf("locality %q", w.Meta.LocalityLabel)
			}
		}},
		{name: "network from pod label", mut: func(p *corev1.Pod) { p.Labels["topology.istio.io/network"] = "netA" },
			objs: []any{fixtures.Namespace("istio-system", map[string]string{"topology.istio.io/network": "netB"}, nil)},
			check: func(t *testing.T, w *collections.Workload) {
				if w.Meta.Network != "netA" || w.Meta.LabelValue("topology.istio.io/network") != "netA" {
					t.Fatalf("network %q", w.Meta.Network)
				}
			}},
		{name: "network from system namespace, not the pod's namespace",
			objs: []any{
				fixtures.Namespace("istio-system", map[string]string{"topology.istio.io/network": "netB"}, nil),
				fixtures.Namespace("ns1", map[string]string{"topology.istio.io/network": "netC"}, nil),
			},
			check: func(t *testing.T, w *collections.Workload) {
				if w.Meta.Network != "netB" {
					t.Fatalf("network %q", w.Meta.Network)
				}
			}},
		{name: "not ready pod is not found by IP", mut: func(p *corev1.Pod) {
			p.Status.Conditions[0].Status = corev1.ConditionFalse
		}, check: func(t *testing.T, w *collections.Workload) {
			if w.Ready {
				t.Fatal("not-ready pod must not be Ready")
			}
		}},
		{name: "deleting pod is not found by IP", mut: func(p *corev1.Pod) {
			p.DeletionTimestamp = &metav1.Time{}
		}, check: func(t *testing.T, w *collections.Workload) {
			if w.Ready {
				t.Fatal("deleting pod must not be Ready")
			}
		}},
		{name: "subdomain sets hostname", mut: func(p *corev1.Pod) { p.Spec.Subdomain = "sub" },
			check: func(t *testing.T, w *collections.Workload) {
				if w.Meta.SubDomain != "sub" || w.Meta.HostName != w.Name {
					t.Fatalf("hostname %q subdomain %q", w.Meta.HostName, w.Meta.SubDomain)
				}
			}},
		// kubelabels.CanonicalService (util.AppendLbEndpointMetadata): a present label wins even
		// when empty, and "latest" is not written.
		{name: "canonical name from an empty present label", mut: func(p *corev1.Pod) { p.Labels["app.kubernetes.io/name"] = "" },
			check: func(t *testing.T, w *collections.Workload) {
				if w.Meta.CanonicalName != "" {
					t.Fatalf("canonical name %q, want the empty label's value", w.Meta.CanonicalName)
				}
			}},
		{name: "canonical revision latest is not written", mut: func(p *corev1.Pod) {
			p.Labels["service.istio.io/canonical-revision"] = "latest"
			p.Labels["version"] = "v2"
		},
			check: func(t *testing.T, w *collections.Workload) {
				if w.Meta.CanonicalRevision != "" {
					t.Fatalf("canonical revision %q", w.Meta.CanonicalRevision)
				}
			}},
		{name: "canonical revision from version label", mut: func(p *corev1.Pod) { p.Labels["version"] = "v2" },
			check: func(t *testing.T, w *collections.Workload) {
				if w.Meta.CanonicalRevision != "v2" || w.Meta.CanonicalName != "foo" {
					t.Fatalf("canonical %q %q", w.Meta.CanonicalName, w.Meta.CanonicalRevision)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := fixtures.Pod("ns1", "foo-abc12-x1", "foo", "10.1.0.1", "n1")
			if tc.mut != nil {
				tc.mut(pod)
			}
			w := workloadOf(t, pod, tc.objs...)
			tc.check(t, w)
		})
	}
}

// A Running Pod without an IP (a transient API state) is a workload that cannot be found by
// address; endpoints naming it by targetRef still get its metadata.
func TestRunningPodWithoutIP(t *testing.T) {
	pod := fixtures.Pod("ns1", "p", "foo", "", "n1")
	pod.Status.PodIPs = nil
	w := workloadOf(t, pod)
	if w == nil || w.Ready || len(w.IPs) != 0 || w.Meta == nil {
		t.Fatalf("workload %+v", w)
	}
}

func TestWorkloadName(t *testing.T) {
	owner := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{Kind: kind, Name: name, Controller: fixtures.Ptr(true)}}
	}
	cases := []struct {
		name   string
		pod    corev1.Pod
		expect string
	}{
		{"workload-name label wins", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", GenerateName: "x-",
			Labels: map[string]string{"service.istio.io/workload-name": "wl"}, OwnerReferences: owner("ReplicaSet", "d-1")}}, "wl"},
		{"deployment", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", GenerateName: "d-5d9-",
			Labels: map[string]string{"pod-template-hash": "5d9"}, OwnerReferences: owner("ReplicaSet", "d-5d9")}}, "d"},
		{"replicaset without hash label", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", GenerateName: "foo-abc-",
			OwnerReferences: owner("ReplicaSet", "foo-abc")}}, "foo-abc"},
		{"argo rollout", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", GenerateName: "r-77-",
			Labels: map[string]string{"rollouts-pod-template-hash": "77"}, OwnerReferences: owner("ReplicaSet", "r-77")}}, "r"},
		{"deploymentconfig", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", GenerateName: "dc-1-",
			Labels: map[string]string{"deploymentconfig": "dc"}, OwnerReferences: owner("ReplicationController", "dc-1")}}, "dc"},
		{"cronjob", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", GenerateName: "cj-28000000-",
			OwnerReferences: owner("Job", "cj-28000000")}}, "cj"},
		{"plain job", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", GenerateName: "job-",
			OwnerReferences: owner("Job", "job")}}, "job"},
		{"no generateName keeps pod name", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p",
			OwnerReferences: owner("ReplicaSet", "d-1")}}, "p"},
		{"no controller owner keeps pod name", corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", GenerateName: "x-",
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "d-1"}}}}, "p"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := collections.NewPod(&tc.pod)
			if got := WorkloadName(p); got != tc.expect {
				t.Fatalf("got %q want %q", got, tc.expect)
			}
		})
	}
}

// The Pods of one fetch on several nodes, listed in any order (one node twice), each take their
// own node's locality; a Pod on an unknown node has none.
func TestWorkloadsTakeTheirOwnNodes(t *testing.T) {
	var objs []any
	var keys []string
	for i, n := range []string{"n3", "n1", "n2", "n1", "gone"} {
		name := fmt.Sprintf("foo-%d", i)
		objs = append(objs, fixtures.Pod("ns1", name, "foo", fmt.Sprintf("10.1.0.%d", i+1), n))
		keys = append(keys, "ns1/"+name)
	}
	for _, n := range []string{"n2", "n3", "n1"} {
		objs = append(objs, fixtures.ZoneNode(n, "r-"+n, "z-"+n))
	}
	ws := FetchWorkloads(krt.TestingDummyContext{}, collections.DefaultConfig(), StaticWorkloadInputs(test.NewStop(t), objs...), keys)
	for i, n := range []string{"n3", "n1", "n2", "n1", "gone"} {
		w := ws.Get(keys[i])
		if w == nil {
			t.Fatalf("no workload for %s", keys[i])
		}
		want := "r-" + n
		if n == "gone" {
			want = ""
		}
		if got := w.Meta.Locality.Region; got != want {
			t.Errorf("%s on %s: region %q, want %q", keys[i], n, got, want)
		}
	}
}

// TestCanonicalServiceIsIstiods holds krteds' reading of the canonical labels to the library's
// (kubelabels.CanonicalService, then "latest" not written, as AppendLbEndpointMetadata).
func TestCanonicalServiceIsIstiods(t *testing.T) {
	for _, labels := range []map[string]string{
		nil,
		{"app": "a"},
		{"app": "", "app.kubernetes.io/name": "n"},
		{"app.kubernetes.io/name": "", "app": "a"},
		{"service.istio.io/canonical-name": "c", "app": "a", "version": "v1"},
		{"version": "", "app.kubernetes.io/version": "v2"},
		{"service.istio.io/canonical-revision": "latest"},
		{"service.istio.io/canonical-revision": "", "version": "v3"},
		{"app.kubernetes.io/version": "latest", "version": "v4"},
	} {
		wantName, wantRev := kubelabels.CanonicalService(labels, "wl")
		if wantRev == "latest" {
			wantRev = ""
		}
		name, rev := canonicalService(func(k string) (string, bool) { v, ok := labels[k]; return v, ok }, "wl")
		if name != wantName || rev != wantRev {
			t.Errorf("%v: %q %q, istiod %q %q", labels, name, rev, wantName, wantRev)
		}
	}
}
