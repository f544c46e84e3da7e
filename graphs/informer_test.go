package graphs_test

import (
	"context"
	"strings"
	"testing"

	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/collections/sources"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

const manifests = `
apiVersion: v1
kind: Node
metadata:
  name: n1
  labels:
    topology.kubernetes.io/region: r1
    topology.kubernetes.io/zone: z1
---
apiVersion: v1
kind: Namespace
metadata:
  name: ns1
---
# a comment-only document is skipped
---
apiVersion: v1
kind: Service
metadata: {name: foo, namespace: ns1}
spec:
  clusterIP: 10.96.0.10
  selector: {app: foo}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: foo-1, namespace: ns1, labels: {app: foo}}
spec: {nodeName: n1, serviceAccountName: foo}
status:
  phase: Running
  podIP: 10.0.0.1
  podIPs: [{ip: 10.0.0.1}]
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Pod
metadata: {name: failed, namespace: ns1, labels: {app: foo}}
status: {phase: Failed, podIP: 10.0.0.3}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: foo-abc
  namespace: ns1
  labels: {kubernetes.io/service-name: foo}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [10.0.0.1]
  conditions: {ready: true, serving: true, terminating: false}
  targetRef: {kind: Pod, name: foo-1, namespace: ns1}
- addresses: [10.0.0.2]
  conditions: {ready: true, serving: true, terminating: false}
  targetRef: {kind: Pod, name: foo-2, namespace: ns1}
`

// TestInformerInputs runs the graph over the informers krteds uses against a cluster, here on a
// fake client seeded from YAML: the Failed pod is filtered out, the late pod arrives through the
// API.
func TestInformerInputs(t *testing.T) {
	var objs []runtime.Object
	for _, doc := range strings.Split(manifests, "\n---\n") {
		o, _, err := kube.IstioCodec.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			continue // the comment-only document
		}
		objs = append(objs, o)
	}
	if len(objs) != 6 {
		t.Fatalf("want 6 objects, got %d", len(objs))
	}
	stop := test.NewStop(t)
	client := kube.NewFakeClient(objs...)
	opts := krt.NewOptionsBuilder(stop, "", new(krt.DebugHandler))
	g := rigs.GraphOf(t, graphs.Build(collections.DefaultConfig(), sources.Informers(client, opts), opts))
	client.RunAndWait(stop)
	if !g.WaitUntilSynced(stop) {
		t.Fatal("not synced")
	}
	expectAddrs(t, g, "ns1/foo", "10.0.0.1:8080/Healthy")
	if p := g.Inputs.Pods.GetKey("ns1/failed"); p != nil {
		t.Fatalf("a failed pod must not be an input: %+v", *p)
	}
	se := g.ServiceEndpoints.GetKey("ns1/foo")
	if m := se.Endpoints[0].Meta; m.LocalityLabel != "r1/z1/" || m.ServiceAccount != "spiffe://cluster.local/ns/ns1/sa/foo" {
		t.Fatalf("meta %+v", m)
	}

	// The late pod arrives through the API: its endpoint appears by itself.
	_, err := client.Kube().CoreV1().Pods("ns1").Create(context.Background(),
		fixtures.Pod("ns1", "foo-2", "foo", "10.0.0.2", "n1"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expectAddrs(t, g, "ns1/foo", "10.0.0.1:8080/Healthy", "10.0.0.2:8080/Healthy")
}
