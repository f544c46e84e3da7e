package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/rigs"
)

// drainingMesh: two services whose second Pod carries istio.io/draining; cart is a
// persistent-session service.
func drainingMesh() string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n")
	for _, svc := range []struct {
		name, labels string
		net          int
	}{{"reviews", "{}", 1}, {"cart", "{istio.io/persistent-session: cart-session}", 2}} {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: shop, labels: %[2]s}
spec:
  clusterIP: 10.96.%[3]d.10
  ports: [{name: http, port: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[1]s-a
  namespace: shop
  labels: {kubernetes.io/service-name: %[1]s}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [10.10.%[3]d.11]
  conditions: {ready: true}
  targetRef: {kind: Pod, namespace: shop, name: %[1]s-1}
- addresses: [10.10.%[3]d.12]
  conditions: {ready: true}
  targetRef: {kind: Pod, namespace: shop, name: %[1]s-2}
`, svc.name, svc.labels, svc.net)
		for i, labels := range []string{"{app: x}", `{app: x, istio.io/draining: "true"}`} {
			fmt.Fprintf(&b, `---
apiVersion: v1
kind: Pod
metadata: {name: %s-%d, namespace: shop, labels: %s}
spec: {nodeName: node-a}
status: {phase: Running, podIP: 10.10.%d.%d, conditions: [{type: Ready, status: "True"}]}
`, svc.name, i+1, labels, svc.net, 11+i)
		}
	}
	return b.String()
}

// TestTheDrainingLabelOverADS: a Pod labelled istio.io/draining is left out of a service's CLA,
// and sent DRAINING to a persistent-session service, as a client receives them over ADS; explain
// names the label.
func TestTheDrainingLabelOverADS(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "mesh.yaml"), []byte(drainingMesh()), 0o644); err != nil {
		t.Fatal(err)
	}
	a := rigs.StartApp(t, app.Options{Config: collections.DefaultConfig(), Manifests: dir, DebugListener: rigs.Listen(t)})
	a.AwaitSynced()
	cc, err := adsclient.Dial(a.XDSAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	node := adsclient.Node{ID: "sidecar~10.10.0.11~frontend-1.shop~shop.svc.cluster.local", Namespace: "shop"}
	s, err := adsclient.Open(context.Background(), cc, node)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for cluster, want := range map[string]string{
		"outbound|8080||reviews.shop.svc.cluster.local": "10.10.1.11:HEALTHY",
		"outbound|8080||cart.shop.svc.cluster.local":    "10.10.2.11:HEALTHY,10.10.2.12:DRAINING",
	} {
		if err := s.Request(adsclient.TypeCLA, cluster); err != nil {
			t.Fatal(err)
		}
		resp, err := s.Recv(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if got := claEndpoints(resp); got != want {
			t.Errorf("%s: the client received %s, want %s", cluster, got, want)
		}
		_ = s.Ack(resp, cluster)
	}
	ex := explainOver(t, a.DebugAddr, node.ID, "outbound|8080||reviews.shop.svc.cluster.local")
	found := false
	for _, v := range ex.Endpoints {
		if v.Address == "10.10.1.12" {
			found = true
			if v.Sent || !strings.Contains(v.Reason, `istio.io/draining="true"`) {
				t.Errorf("explain of the labelled endpoint: %+v", v)
			}
		}
	}
	if !found {
		t.Errorf("explain does not list 10.10.1.12: %+v", ex.Endpoints)
	}
}
