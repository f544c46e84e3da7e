package app_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

// proxyIDManifests: ns1 has foo (one endpoint) and bar (none), ns2 a service exported only to
// ns2.
const proxyIDManifests = `
apiVersion: v1
kind: Namespace
metadata: {name: ns1}
---` + appManifests + `
---
apiVersion: v1
kind: Service
metadata: {name: bar, namespace: ns1}
spec: {clusterIP: 10.96.0.11, ports: [{name: http, port: 80, targetPort: 8080}], selector: {app: bar}}
---
` + secretManifests

// TestProxyIDFormsOnEveryPage holds every debug page that takes a proxy to the forms istiod's
// getDebugConnection and getProxyConnection (pilot/pkg/xds/debug.go) accept, and krteds' own:
// ?proxyID= on /debug/edsz, /debug/config_dump, /debug/explain and /debug/adsz over HTTP and
// over istio.io/debug, and the resource name of istio.io/debug/config_dump, for a caller that
// sees everything (loopback) and for the identities of two namespaces. The proxies: one whose
// pod name has dots (web.v2-0) connected twice in ns1 (the later connection is the one its
// node id names), the same pod name in ns2, and a gateway of ns1. Every answer is compared with
// the page of the connection it should show, asked by connection id; those pages differ from
// proxy to proxy (checked first), so a form resolving to another proxy fails.
func TestProxyIDFormsOnEveryPage(t *testing.T) {
	r := startTLSRigWith(t, proxyIDManifests)
	plain, err := adsclient.Dial(r.XDSAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()

	const (
		foo    = "outbound|80||foo.ns1.svc.cluster.local"
		bar    = "outbound|80||bar.ns1.svc.cluster.local"
		nodeA  = "sidecar~10.0.1.21~web.v2-0.ns1~ns1.svc.cluster.local"
		nodeB  = "sidecar~10.0.2.21~web.v2-0.ns2~ns2.svc.cluster.local"
		nodeG  = "router~10.0.1.30~istio-ingressgateway-5d8f7b9c-abcde.ns1~ns1.svc.cluster.local"
		ctxTTL = 10 * time.Second
	)
	// Each proxy watches something of its own, so that every page tells them apart.
	type watch struct{ typeURL, name string }
	connect := func(node adsclient.Node, watches ...watch) string {
		t.Helper()
		s, err := adsclient.Open(context.Background(), plain, node)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		for _, w := range watches {
			if err := s.Request(w.typeURL, w.name); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Recv(ctxTTL); err != nil {
				t.Fatalf("%s: %s %s: %v", node.ID, w.typeURL, w.name, err)
			}
		}
		return connOf(t, r, node.ID)
	}
	conns := map[string]string{} // proxy name → connection id
	conns["aOld"] = connect(adsclient.Node{ID: nodeA, Namespace: "ns1", Network: "n-old"}, watch{adsclient.TypeCluster, foo})
	conns["aNew"] = connect(adsclient.Node{ID: nodeA, Namespace: "ns1"}, watch{adsclient.TypeCluster, bar}, watch{adsclient.TypeCLA, foo})
	conns["b"] = connect(adsclient.Node{ID: nodeB, Namespace: "ns2"}, watch{adsclient.TypeCluster, secretCluster}, watch{adsclient.TypeCLA, secretCluster})
	conns["g"] = connect(adsclient.Node{ID: nodeG, Namespace: "ns1"}, watch{adsclient.TypeCLA, bar})

	// The callers: loopback (HTTP, and a plaintext stream), and one stream per namespace
	// identity on the authenticated port. Each stream is connected (its first answer received)
	// before any page is asked, and none has a name the forms below are a part of.
	callers := map[string]*debugStream{
		"loopback": openDebugStream(t, plain, adsclient.Node{ID: "sidecar~127.0.0.1~caller.istio-system~istio-system.svc.cluster.local", Namespace: "istio-system"}),
		"ns1":      openDebugStream(t, r.dialAs("spiffe://cluster.local/ns/ns1/sa/caller"), adsclient.Node{ID: "sidecar~10.0.1.99~caller.ns1~ns1.svc.cluster.local", Namespace: "ns1"}),
		"ns2":      openDebugStream(t, r.dialAs("spiffe://cluster.local/ns/ns2/sa/caller"), adsclient.Node{ID: "sidecar~10.0.2.99~caller.ns2~ns2.svc.cluster.local", Namespace: "ns2"}),
	}

	pages := []struct {
		name, extra string
		scoped      bool // readable by an identity outside the system namespace
	}{
		{"edsz", "", true},
		{"config_dump", "", true},
		{"explain", "&cluster=" + url.QueryEscape(foo), false},
		{"adsz", "", false},
	}
	pagePath := func(page, extra, id string) string {
		return page + "?" + url.Values{"proxyID": {id}}.Encode() + extra
	}
	// want: each page of each proxy, asked over HTTP by its connection id.
	want := map[string]map[string]string{}
	wantDump := map[string]string{}
	for name, id := range conns {
		want[name] = map[string]string{}
		for _, p := range pages {
			code, body := r.get("/debug/" + pagePath(p.name, p.extra, id))
			if code != 200 {
				t.Fatalf("/debug/%s of %s by its connection id %s: %d %s", p.name, name, id, code, body)
			}
			want[name][p.name] = body
		}
		wantDump[name] = callers["loopback"].ask(t, xdsdebug.TypeDebugConfigDump, id)
		if wantDump[name] == "" {
			t.Fatalf("istio.io/debug/config_dump of %s by its connection id %s: nothing", name, id)
		}
	}
	for a := range conns {
		for b := range conns {
			if a >= b {
				continue
			}
			for _, p := range pages {
				if want[a][p.name] == want[b][p.name] {
					t.Fatalf("/debug/%s shows %s and %s alike; the test could not tell them apart:\n%s", p.name, a, b, want[a][p.name])
				}
			}
			if wantDump[a] == wantDump[b] {
				t.Fatalf("istio.io/debug/config_dump shows %s and %s alike", a, b)
			}
		}
	}

	// Each row: what each caller is shown: a proxy, "404" (no proxy the caller sees), "409"
	// (a part of several proxies' <pod>.<namespace>).
	for _, tc := range []struct {
		form, why          string
		loopback, ns1, ns2 string
	}{
		{conns["aOld"], "a connection id: that connection, though a later one has the same node id", "aOld", "aOld", "404"},
		{conns["aNew"], "a connection id", "aNew", "aNew", "404"},
		{conns["b"], "a connection id of ns2", "b", "404", "b"},
		{conns["g"], "a gateway's connection id", "g", "g", "404"},
		{nodeA, "a node id: its latest connection", "aNew", "aNew", "404"},
		{nodeB, "a node id of ns2", "b", "404", "b"},
		{nodeG, "a gateway's node id", "g", "g", "404"},
		{"web.v2-0.ns1", "istiod's <pod>.<namespace>, the pod name with a dot", "aNew", "aNew", "404"},
		{"web.v2-0.ns2", "the same pod name in ns2", "b", "404", "b"},
		{"istio-ingressgateway-5d8f7b9c-abcde.ns1", "a gateway's <pod>.<namespace>", "g", "g", "404"},
		{"web.v2-0", "a bare pod name, in two namespaces: one per caller of a namespace", "409", "aNew", "b"},
		{"istio-ingressgateway", "a Deployment's prefix (istioctl's example, edsz?proxyID=istio-ingressgateway)", "g", "g", "404"},
		{"v2-0.ns2", "a part of one proxy's <pod>.<namespace>", "b", "404", "b"},
		{"-", "a part of every proxy's <pod>.<namespace>", "409", "409", "b"},
		{"nobody.ns1", "no such proxy", "404", "404", "404"},
		{"web.v2-0.ns1-7", "istiod's connection id (<pod>.<namespace>-<n>): krteds' are its own", "404", "404", "404"},
		{"sotw-999999", "a connection id never given", "404", "404", "404"},
	} {
		t.Run(tc.form, func(t *testing.T) {
			for caller, expect := range map[string]string{"loopback": tc.loopback, "ns1": tc.ns1, "ns2": tc.ns2} {
				check := func(via, page, got string, wantBody string) {
					t.Helper()
					if got != wantBody {
						t.Errorf("%s (%s), %s %s: got\n%s\nwant\n%s", tc.form, tc.why, via, page, got, wantBody)
					}
				}
				lookupErr := func(prefix bool) string {
					if expect == "404" {
						msg := (&xdsdebug.ProxyLookupError{ID: tc.form}).Error() + "\n"
						if prefix {
							return "404 Not Found: " + msg
						}
						return msg
					}
					return ""
				}
				for _, p := range pages {
					path := pagePath(p.name, p.extra, tc.form)
					expected := ""
					switch expect {
					case "404":
						expected = lookupErr(true)
					case "409":
						expected = "" // checked below: the candidates depend on the caller
					default:
						expected = want[expect][p.name]
					}
					if caller != "loopback" && !p.scoped {
						expected = "" // refused: not a page of NamespacePages
					}
					got := callers[caller].ask(t, xdsdebug.TypeDebug, path)
					if expect == "409" && (caller == "loopback" || p.scoped) {
						checkAmbiguous(t, "istio.io/debug "+path+" as "+caller, got, caller)
						continue
					}
					check("istio.io/debug as "+caller, path, got, expected)
					if caller != "loopback" {
						continue
					}
					code, body := r.get("/debug/" + path)
					switch expect {
					case "404":
						if code != 404 || body != lookupErr(false) {
							t.Errorf("%s (%s), HTTP /debug/%s: %d %q, want 404 %q", tc.form, tc.why, path, code, body, lookupErr(false))
						}
					case "409":
						if code != 409 {
							t.Errorf("%s (%s), HTTP /debug/%s: %d, want 409", tc.form, tc.why, path, code)
						}
						checkAmbiguous(t, "HTTP /debug/"+path, "409 Conflict: "+body, caller)
					default:
						check("HTTP", "/debug/"+path, body, want[expect][p.name])
					}
				}
				got := callers[caller].ask(t, xdsdebug.TypeDebugConfigDump, tc.form)
				expected := ""
				if expect != "404" && expect != "409" {
					expected = wantDump[expect]
				}
				if got != expected {
					t.Errorf("%s (%s), istio.io/debug/config_dump as %s: got a dump of %d bytes, want %s's (%d bytes)", tc.form, tc.why, caller, len(got), expect, len(expected))
				}
			}
		})
	}

	// No proxyID: istiod's message, which istioctl x internal-debug recognises.
	if code, body := r.get("/debug/edsz"); code != 400 || !strings.HasPrefix(body, "You must provide a proxyID in the query string") {
		t.Errorf("/debug/edsz without a proxyID: %d %q", code, body)
	}
	if got := callers["ns1"].ask(t, xdsdebug.TypeDebug, "edsz"); !strings.HasPrefix(got, "400 Bad Request: You must provide a proxyID") {
		t.Errorf("istio.io/debug edsz without a proxyID, as ns1: %q", got)
	}
}

// checkAmbiguous: a 409 naming the candidates, all of them proxies the caller may see.
func checkAmbiguous(t *testing.T, what, body, caller string) {
	t.Helper()
	if !strings.HasPrefix(body, "409 Conflict: ") || !strings.Contains(body, "name one by its <pod>.<namespace>") {
		t.Errorf("%s: want a 409 naming the candidates, got %q", what, body)
	}
	for _, other := range []string{"ns1", "ns2"} {
		if caller != "loopback" && other != caller && strings.Contains(body, "."+other) {
			t.Errorf("%s: the caller of %s is told of a proxy of %s: %q", what, caller, other, body)
		}
	}
}

// connOf is the connection id of the latest connection of a node id.
func connOf(t *testing.T, r *tlsRig, nodeID string) string {
	t.Helper()
	latest := ""
	for _, st := range r.XDS.Statuses() {
		if st.Proxy != nil && st.Proxy.ID == nodeID && (latest == "" || st.ConnectedAt.After(connectedAt(r, latest))) {
			latest = st.ConnID
		}
	}
	if latest == "" {
		t.Fatalf("%s is not connected", nodeID)
	}
	return latest
}

func connectedAt(r *tlsRig, connID string) time.Time {
	for _, st := range r.XDS.Statuses() {
		if st.ConnID == connID {
			return st.ConnectedAt
		}
	}
	return time.Time{}
}

// debugStream is one ADS stream asking debug types, one request at a time.
type debugStream struct {
	s *adsclient.Stream
}

// openDebugStream opens a stream as node and waits for the answer to its first request, so
// that it is a connected client before it asks anything else.
func openDebugStream(t *testing.T, cc *grpc.ClientConn, node adsclient.Node) *debugStream {
	t.Helper()
	s, err := adsclient.Open(context.Background(), cc, node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	d := &debugStream{s: s}
	d.ask(t, xdsdebug.TypeDebugSyncz, "")
	return d
}

// ask sends one request of a debug type and returns its answer: the resources' bytes, the
// page body for istio.io/debug, "" for none.
func (d *debugStream) ask(t *testing.T, typeURL, name string) string {
	t.Helper()
	req := &discovery.DiscoveryRequest{TypeUrl: typeURL}
	if name != "" {
		req.ResourceNames = []string{name}
	}
	if err := d.s.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := d.s.Recv(10 * time.Second)
	if err != nil {
		t.Fatalf("%s %s: %v", typeURL, name, err)
	}
	if resp.TypeUrl != typeURL {
		t.Fatalf("%s %s: answered with %s", typeURL, name, resp.TypeUrl)
	}
	var out strings.Builder
	for _, r := range resp.Resources {
		if typeURL == xdsdebug.TypeDebug {
			out.Write(r.Value)
			continue
		}
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(b)
	}
	return out.String()
}
