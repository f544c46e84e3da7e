package app_test

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

// secretManifests add a service of ns2 exported only to ns2.
const secretManifests = `
apiVersion: v1
kind: Namespace
metadata: {name: ns2}
---
apiVersion: v1
kind: Service
metadata: {name: secret, namespace: ns2, annotations: {networking.istio.io/exportTo: "."}}
spec: {clusterIP: 10.96.0.20, ports: [{name: http, port: 80, targetPort: 8080}], selector: {app: secret}}
---
apiVersion: v1
kind: Pod
metadata: {name: secret-1, namespace: ns2, labels: {app: secret}}
spec: {nodeName: n1, serviceAccountName: secret}
status: {phase: Running, podIP: 10.0.2.1, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: secret-a, namespace: ns2, labels: {kubernetes.io/service-name: secret}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [10.0.2.1]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: secret-1, namespace: ns2}
`

const secretCluster = "outbound|80||secret.ns2.svc.cluster.local"

// tlsRig is an app serving the authenticated port with client certificates of a test CA.
type tlsRig struct {
	*appRig
	ca     *fixtures.CA
	secure string
}

func startTLSRig(t *testing.T) *tlsRig {
	t.Helper()
	return startTLSRigWith(t, appManifests+"\n---\n"+secretManifests)
}

// startTLSRigWith is startTLSRig serving the objects of manifests.
func startTLSRigWith(t *testing.T, manifests string) *tlsRig {
	t.Helper()
	objs, err := rigs.ObjectsOf([]byte(manifests))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := fixtures.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	serving, err := ca.Issue("", true)
	if err != nil {
		t.Fatal(err)
	}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := startAppRigWith(t, app.Options{Objects: objs, SecureListener: sl, SecureTLS: &tls.Config{
		Certificates: []tls.Certificate{serving}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}})
	return &tlsRig{appRig: r, ca: ca, secure: sl.Addr().String()}
}

// dialAs connects to the authenticated port with a certificate of the SPIFFE identity.
func (r *tlsRig) dialAs(spiffe string) *grpc.ClientConn {
	r.t.Helper()
	cert, err := r.ca.Issue(spiffe, false)
	if err != nil {
		r.t.Fatal(err)
	}
	cc, err := grpc.NewClient(r.secure, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: r.ca.Pool(), ServerName: "127.0.0.1", Certificates: []tls.Certificate{cert},
	})))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// debugPage asks istio.io/debug for a page on a new stream as node, and returns its body.
func debugPage(t *testing.T, cc *grpc.ClientConn, node adsclient.Node, page string) string {
	t.Helper()
	s, err := adsclient.Open(context.Background(), cc, node)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: xdsdebug.TypeDebug, ResourceNames: []string{page}}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv(10 * time.Second)
	if err != nil {
		t.Fatalf("istio.io/debug %s: %v", page, err)
	}
	var body strings.Builder
	for _, r := range resp.Resources {
		body.Write(r.Value)
	}
	return body.String()
}

// TestDebugOverXDSStaysInTheCallersNamespace: a client of ns1 on the authenticated port reads
// istio.io/debug pages of its own namespace's proxies only. Naming a proxy of ns2 by its
// connection id (small sequential numbers) through a node id whose pod part is that id, or by
// reusing the ns2 proxy's exact node id, shows the caller its own proxy, never the ns2 proxy's
// ClusterLoadAssignment of a service exported only to ns2.
func TestDebugOverXDSStaysInTheCallersNamespace(t *testing.T) {
	r := startTLSRig(t)
	plain, err := adsclient.Dial(r.XDSAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	victimNode := adsclient.Node{ID: "sidecar~10.0.2.9~victim-abc.ns2~ns2.svc.cluster.local", Namespace: "ns2"}
	victim, err := adsclient.Open(context.Background(), plain, victimNode)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	if err := victim.Request(adsclient.TypeCLA, secretCluster); err != nil {
		t.Fatal(err)
	}
	resp, err := victim.Recv(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if clas, _ := adsclient.CLAs(resp); len(clas) != 1 || len(clas[0].Endpoints) == 0 {
		t.Fatalf("the ns2 proxy is not sent the secret service's endpoints: %v", clas)
	}
	var victimConn string
	for _, st := range r.XDS.Statuses() {
		if st.Proxy != nil && st.Proxy.ID == victimNode.ID {
			victimConn = st.ConnID
		}
	}
	if victimConn == "" {
		t.Fatal("the ns2 proxy is not connected")
	}
	// Loopback sees it: the page works, and shows the endpoint.
	if body := debugPage(t, plain, adsclient.Node{ID: "sidecar~127.0.0.1~istioctl.istio-system~istio-system.svc.cluster.local", Namespace: "istio-system"},
		"edsz?proxyID="+victimConn); !strings.Contains(body, "10.0.2.1") {
		t.Fatalf("a loopback caller does not see the ns2 proxy's endpoints: %s", body)
	}
	ns1 := r.dialAs("spiffe://cluster.local/ns/ns1/sa/evil")
	for _, tc := range []struct {
		name string
		node adsclient.Node
		page string
	}{
		{"a node id whose pod part is the victim's connection id", adsclient.Node{ID: "sidecar~10.0.1.9~" + victimConn + "~ns1.svc.cluster.local", Namespace: "ns1"},
			"edsz?proxyID=" + victimConn},
		{"the victim's exact node id", adsclient.Node{ID: victimNode.ID, Namespace: "ns1"}, "edsz?proxyID=" + victimNode.ID},
		{"the victim's <pod>.<namespace>", adsclient.Node{ID: "sidecar~10.0.1.8~spy.ns1~ns1.svc.cluster.local", Namespace: "ns1"}, "edsz?proxyID=victim-abc.ns2"},
		{"the victim's config dump", adsclient.Node{ID: "sidecar~10.0.1.7~" + victimConn + "~ns1.svc.cluster.local", Namespace: "ns1"},
			"config_dump?proxyID=" + victimConn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if body := debugPage(t, ns1, tc.node, tc.page); strings.Contains(body, "10.0.2.1") || strings.Contains(body, "secret.ns2") {
				t.Fatalf("a client of ns1 read the ns2 proxy's view through %s: %s", tc.page, body)
			}
		})
	}
}
