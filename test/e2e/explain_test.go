package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"

	"github.com/krteds/krteds/outputs/explain"
	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// explainExtras adds to the example mesh what it lacks for explain's rules: a DestinationRule
// with subsets of reviews, a node-local Service whose endpoints sit on several nodes, and a
// PeerAuthentication disabling mTLS for the reviews workloads of one zone.
const explainExtras = `apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata:
  name: reviews-us-east-1a
  namespace: shop
spec:
  selector:
    matchLabels: {app: reviews, topology.kubernetes.io/zone: us-east-1a}
  mtls: {mode: DISABLE}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
  namespace: shop
spec:
  host: reviews.shop.svc.cluster.local
  subsets:
  - name: v1
    labels: {version: v1}
  - name: v9
    labels: {version: v9}
---
apiVersion: v1
kind: Service
metadata:
  name: ratings-local
  namespace: shop
spec:
  clusterIP: 10.96.2.40
  internalTrafficPolicy: Local
  selector:
    app: ratings
  ports:
  - name: grpc
    port: 9080
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ratings-local-a1
  namespace: shop
  labels:
    kubernetes.io/service-name: ratings-local
addressType: IPv4
ports:
- name: grpc
  port: 9080
- name: other
  port: 9999
endpoints:
- addresses: [10.10.2.11]
  conditions: {ready: true}
  targetRef: {kind: Pod, namespace: shop, name: ratings-6f7a8-aaaaa}
- addresses: [10.10.2.12]
  conditions: {ready: true}
  targetRef: {kind: Pod, namespace: shop, name: ratings-6f7a8-bbbbb}
---
# ratings: outlier detection with minHealthPercent, so its not-ready endpoint is not sent.
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: ratings
  namespace: shop
spec:
  host: ratings.shop.svc.cluster.local
  trafficPolicy:
    outlierDetection:
      consecutive5xxErrors: 5
      minHealthPercent: 50
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ratings-extra
  namespace: shop
  labels:
    kubernetes.io/service-name: ratings
addressType: IPv4
ports:
- name: http
  port: 8080
endpoints:
- addresses: [10.10.2.13]
  conditions: {ready: false, serving: false, terminating: false}
---
# A slice whose only port the Service does not have.
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ratings-badport
  namespace: shop
  labels:
    kubernetes.io/service-name: ratings
addressType: IPv4
ports:
- name: grpc
  port: 9080
endpoints:
- addresses: [10.10.2.14]
  conditions: {ready: true}
---
# cart: a persistent-session service, whose draining endpoint is sent as DRAINING.
apiVersion: v1
kind: Service
metadata:
  name: cart
  namespace: shop
  labels:
    istio.io/persistent-session: cart-session
spec:
  clusterIP: 10.96.2.50
  ports:
  - name: http
    port: 8080
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: cart-a1
  namespace: shop
  labels:
    kubernetes.io/service-name: cart
addressType: IPv4
ports:
- name: http
  port: 8080
endpoints:
- addresses: [10.10.5.1]
  conditions: {ready: true}
- addresses: [10.10.5.2]
  conditions: {ready: false, serving: true, terminating: true}
---
# frontend: proxies in us-east send all their traffic to us-east-1a.
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: frontend
  namespace: shop
spec:
  host: frontend.shop.svc.cluster.local
  trafficPolicy:
    outlierDetection:
      consecutive5xxErrors: 5
    loadBalancer:
      localityLbSetting:
        enabled: true
        distribute:
        - from: us-east/*
          to:
            "us-east/us-east-1a/*": 100
---
# An FQDN slice of reviews, which istiod ignores.
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-fqdn
  namespace: shop
  labels:
    kubernetes.io/service-name: reviews
addressType: FQDN
ports:
- name: grpc
  port: 9080
endpoints:
- addresses: [reviews.example.com]
  conditions: {ready: true}
`

// TestExplainAgreesWithTheWire: for every cluster several different proxies are sent, and for
// every endpoint Kubernetes knows of its service, `sent` in /debug/explain holds exactly when the
// CLA the proxy received over xDS has the endpoint; every endpoint left out has a reason naming a
// rule, and explain's rules never contradict the CLA. The mesh is the two-cluster example with a
// DestinationRule's subsets and a node-local Service added.
func TestExplainAgreesWithTheWire(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, filepath.Join(repoRoot(t), "examples", "mesh"), filepath.Join(dir, "mesh"))
	if err := os.WriteFile(filepath.Join(dir, "mesh", "90-explain.yaml"), []byte(explainExtras), 0o644); err != nil {
		t.Fatal(err)
	}
	_, xdsAddr, debugAddr := startDemo(t, filepath.Join(dir, "mesh"))
	cc, err := adsclient.Dial(xdsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	proxies := []adsclient.Node{
		// In shop, on node-a, in us-east/us-east-1b.
		{ID: "sidecar~10.10.9.1~productpage-1.shop~shop.svc.cluster.local", Namespace: "shop", NodeName: "node-a", Labels: map[string]string{"app": "productpage"},
			Locality: &core.Locality{Region: "us-east", Zone: "us-east-1b"}},
		// Proxyless gRPC in another namespace, on node-b.
		{ID: "sidecar~10.10.9.2~client-1.default~default.svc.cluster.local", Namespace: "default", Generator: "grpc", NodeName: "node-b"},
		// On the other network, as the east cluster's proxies are.
		{ID: "sidecar~10.30.9.3~client-2.shop~shop.svc.cluster.local", Namespace: "shop", ClusterID: "east", Network: "network2"},
	}
	checked, sentUnhealthy, sentDraining, plaintextByPolicy, excluded := 0, 0, 0, 0, map[string]int{}
	for _, node := range proxies {
		clas := receiveAll(t, cc, node)
		for name, cla := range clas {
			ex := explainOver(t, debugAddr, node.ID, name)
			wire := map[string]bool{}
			wireTLS := map[string]string{}
			for _, l := range cla.Endpoints {
				for _, e := range l.LbEndpoints {
					addr := e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
					wire[addr] = true
					wireTLS[addr] = e.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()["tlsMode"].GetStringValue()
				}
			}
			said := map[string]bool{}
			for _, v := range ex.Endpoints {
				checked++
				if v.Sent && v.Health == "UNHEALTHY" {
					sentUnhealthy++
				}
				if v.Sent && v.Health == "DRAINING" {
					sentDraining++
				}
				said[v.Address] = v.Sent
				if v.Sent != wire[v.Address] {
					t.Errorf("%s, %s, %s: explain says sent=%t, the CLA received says %t (%+v)", node.ID, name, v.Address, v.Sent, wire[v.Address], v)
				}
				if v.Sent && v.TLSMode != wireTLS[v.Address] {
					t.Errorf("%s, %s, %s: explain says tlsMode %q, the CLA received has %q", node.ID, name, v.Address, v.TLSMode, wireTLS[v.Address])
				}
				if v.Sent && v.TLSMode == "" && slices.ContainsFunc(v.Facts, func(f string) bool {
					return strings.Contains(f, "DISABLE from PeerAuthentication shop/reviews-us-east-1a")
				}) {
					plaintextByPolicy++
				}
				if !v.Sent {
					if v.Reason == "" || strings.HasPrefix(v.Reason, "not in the CLA, and no rule") {
						t.Errorf("%s, %s, %s: left out without a rule: %q", node.ID, name, v.Address, v.Reason)
					}
					excluded[firstWords(v.Reason)]++
				}
				for _, f := range v.Facts {
					if strings.Contains(f, "but the CLA has it") {
						t.Errorf("%s, %s, %s: %s", node.ID, name, v.Address, f)
					}
				}
			}
			for addr := range wire {
				if _, ok := said[addr]; !ok {
					t.Errorf("%s, %s: the CLA has %s, which explain does not list", node.ID, name, addr)
				}
			}
		}
	}
	t.Logf("%d endpoint verdicts checked; exclusions by reason: %v", checked, excluded)
	// The cases the mesh was built to show, each at least once.
	if sentUnhealthy == 0 || sentDraining == 0 {
		t.Errorf("sent as UNHEALTHY: %d (the example's 10.10.1.13 is), as DRAINING: %d (cart's 10.10.5.2 is)", sentUnhealthy, sentDraining)
	}
	if plaintextByPolicy == 0 {
		t.Error("no endpoint was sent without tlsMode by the PeerAuthentication (reviews' 10.10.1.11 is)")
	}
	for _, want := range []string{"targetRef Pod", "terminating:", "not ready:", "slice shop/reviews-fqdn has addressType FQDN:", "slice shop/ratings-badport gives no endpoint for it:", "left out by the DestinationRule's localityLbSetting distribute:", "its labels", "internalTrafficPolicy Local:", "left out by the network split horizon:"} {
		if !slices.ContainsFunc(keys(excluded), func(k string) bool { return strings.HasPrefix(k, want) }) {
			t.Errorf("no endpoint was left out by %q (exclusions: %v)", want, excluded)
		}
	}
}

// receiveAll connects as a proxy, asks for every cluster and the CLA of each EDS cluster, and
// returns the CLAs received.
func receiveAll(t *testing.T, cc *grpc.ClientConn, node adsclient.Node) map[string]*endpoint.ClusterLoadAssignment {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := adsclient.Open(ctx, cc, node)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Request(adsclient.TypeCluster); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	clusters, err := adsclient.Decode(resp, func() *cluster.Cluster { return &cluster.Cluster{} })
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Ack(resp)
	var names []string
	for _, c := range clusters {
		if c.GetType() == cluster.Cluster_EDS {
			n := c.GetEdsClusterConfig().GetServiceName()
			if n == "" {
				n = c.GetName()
			}
			names = append(names, n)
		}
	}
	if err := s.Request(adsclient.TypeCLA, names...); err != nil {
		t.Fatal(err)
	}
	out := map[string]*endpoint.ClusterLoadAssignment{}
	for len(out) < len(names) {
		resp, err := s.Recv(10 * time.Second)
		if err != nil {
			t.Fatalf("%s: %d of %d CLAs: %v", node.ID, len(out), len(names), err)
		}
		if resp.TypeUrl != adsclient.TypeCLA {
			_ = s.Ack(resp)
			continue
		}
		clas, err := adsclient.Decode(resp, func() *endpoint.ClusterLoadAssignment { return &endpoint.ClusterLoadAssignment{} })
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range clas {
			out[c.ClusterName] = c
		}
		_ = s.Ack(resp, names...)
	}
	if len(names) == 0 {
		t.Fatalf("%s is sent no EDS cluster", node.ID)
	}
	return out
}

func explainOver(t *testing.T, debug, proxy, cluster string) explain.Explanation {
	t.Helper()
	u := fmt.Sprintf("http://%s/debug/explain?proxyID=%s&cluster=%s", debug, url.QueryEscape(proxy), url.QueryEscape(cluster))
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %s", u, resp.StatusCode, body)
	}
	var ex explain.Explanation
	if err := json.Unmarshal(body, &ex); err != nil {
		t.Fatalf("%s: %v", u, err)
	}
	return ex
}

func firstWords(s string) string {
	if i := strings.IndexAny(s, ":("); i > 0 {
		return s[:i+1]
	}
	return s
}

func keys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
