package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"istio.io/istio/pkg/kube"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

const appManifests = `
apiVersion: v1
kind: Namespace
metadata: {name: ns1}
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {topology.kubernetes.io/region: r1, topology.kubernetes.io/zone: z1}}
---
apiVersion: v1
kind: Service
metadata: {name: foo, namespace: ns1}
spec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetPort: 8080}], selector: {app: foo}}
---
apiVersion: v1
kind: Pod
metadata: {name: foo-1, namespace: ns1, labels: {app: foo}}
spec: {nodeName: n1, serviceAccountName: foo}
status: {phase: Running, podIP: 10.0.0.1, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: foo-a, namespace: ns1, labels: {kubernetes.io/service-name: foo}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints:
- addresses: [10.0.0.1]
  conditions: {ready: true}
  targetRef: {kind: Pod, name: foo-1, namespace: ns1}
`

// appRig is the process layer's rig (rigs.App) failing the test when a debug page cannot be read.
type appRig struct {
	*rigs.App
	t *testing.T
}

func startAppRig(t *testing.T) *appRig {
	t.Helper()
	objs, err := rigs.ObjectsOf([]byte(appManifests))
	if err != nil {
		t.Fatal(err)
	}
	return startAppRigWith(t, app.Options{Objects: objs})
}

// startAppRigWith starts the app with o and istiod's default configuration, and waits until it
// is ready.
func startAppRigWith(t *testing.T, o app.Options) *appRig {
	t.Helper()
	o.Config, o.DebugListener = collections.DefaultConfig(), rigs.Listen(t)
	r := &appRig{App: rigs.StartApp(t, o), t: t}
	r.AwaitReady()
	return r
}

func (r *appRig) get(path string) (int, string) {
	r.t.Helper()
	code, body := r.Get(path)
	if code == 0 {
		r.t.Fatalf("GET %s: %s", path, body)
	}
	return code, body
}

func (r *appRig) getJSON(path string, into any) {
	r.t.Helper()
	code, body := r.get(path)
	if code != http.StatusOK {
		r.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), into); err != nil {
		r.t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
}

// pages polls the debug server's pages, which are HTTP endpoints.
var pages = fixtures.Polling("the debug pages are HTTP endpoints")

// TestDebugEndpointsAndMetrics reads every debug endpoint and metric after known changes: a
// client connects and NACKs, an endpoint flips, and a bad slice is created.
func TestDebugEndpointsAndMetrics(t *testing.T) {
	r := startAppRig(t)

	cc, err := adsclient.Dial(r.XDSAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	s, err := adsclient.Open(context.Background(), cc, adsclient.Node{ID: "sidecar~10.0.0.9~client.ns1~ns1.svc.cluster.local", Namespace: "ns1"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const cluster = "outbound|80||foo.ns1.svc.cluster.local"
	_ = s.Request(adsclient.TypeCLA, cluster)
	first, err := s.Recv(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Ack(first, cluster)

	// Known change 1: the endpoint turns not ready; the push is NACKed.
	slice := fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.NotReady})
	r.Static.Apply(slice, false)
	second, err := s.Recv(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Nack(second, first.VersionInfo, "test rejection", cluster)
	// Known change 2: an invalid slice.
	bad := fixtures.Slice("ns1", "bad", "foo", fixtures.HTTPSlice, fixtures.Endpoint{IP: "not-an-ip", Cond: fixtures.Ready})
	r.Static.Apply(bad, false)

	t.Run("ready", func(t *testing.T) {
		if code, _ := r.get("/ready"); code != 200 {
			t.Fatalf("/ready %d", code)
		}
	})
	t.Run("version", func(t *testing.T) {
		var v struct{ Version, Commit, GoVersion string }
		r.getJSON("/version", &v)
		if v.Version == "" || v.Commit == "" || !strings.HasPrefix(v.GoVersion, "go") {
			t.Fatalf("/version %+v", v)
		}
	})
	t.Run("index with a trailing slash", func(t *testing.T) {
		if code, body := r.get("/debug/"); code != 200 || !strings.Contains(body, `href="/debug/krt"`) {
			t.Fatalf("/debug/ %d", code)
		}
		if code, _ := r.get("/debug/nothing-here"); code != 404 {
			t.Fatalf("/debug/nothing-here %d", code)
		}
	})
	t.Run("index", func(t *testing.T) {
		_, body := r.get("/debug")
		for _, p := range []string{"/debug/krt", "/debug/krtz", "/debug/endpointShardz", "/debug/registryz", "/debug/syncz", "/debug/adsz", "/debug/memz", "/debug/pprof/", "/metrics"} {
			if !strings.Contains(body, `href="`+p+`"`) {
				t.Errorf("index lacks %s", p)
			}
		}
	})
	t.Run("krt", func(t *testing.T) {
		var snap graphs.Snapshot
		pages.Await(t, rigs.Timeout, "SliceEndpoints to hold both slices", func() (bool, string) {
			r.getJSON("/debug/krt", &snap)
			n, _ := snap.Node(graphs.NameSliceEndpoints)
			return n.Size == 2 && n.Recomputes >= 2 && n.LastChange != nil, fmt.Sprintf("%+v", n)
		})
		if _, body := r.get("/debug/krt?format=dot"); !strings.Contains(body, `"input/EndpointSlices" -> "SliceEndpoints"`) {
			t.Fatalf("dot:\n%s", body)
		}
		_, body := r.get("/debug/krt?format=html")
		if !strings.Contains(body, "<svg") || !strings.Contains(body, `<script src="krt/dagre.min.js">`) || !strings.Contains(body, `fetch("krt?format=json"`) {
			t.Fatal("html page must draw with SVG, lay out with the embedded dagre and refresh from this server")
		}
		// The page's relative URLs resolve against /debug/krt: the library is served beside it.
		if code, js := r.get("/debug/krt/dagre.min.js"); code != 200 || !strings.Contains(js, "var dagre=") {
			t.Fatalf("/debug/krt/dagre.min.js: %d %.100q", code, js)
		}
		if code, lic := r.get("/debug/krt/licenses"); code != 200 || !strings.Contains(lic, "Chris Pettitt") {
			t.Fatalf("/debug/krt/licenses: %d %.100q", code, lic)
		}
	})
	t.Run("krtz", func(t *testing.T) {
		var dump []struct {
			Name  string `json:"name"`
			State struct {
				Outputs map[string]json.RawMessage `json:"outputs"`
			} `json:"state"`
		}
		r.getJSON("/debug/krtz?collection=ServiceInfos", &dump)
		if len(dump) != 1 || dump[0].Name != "ServiceInfos" || dump[0].State.Outputs["ns1/foo"] == nil {
			t.Fatalf("krtz %+v", dump)
		}
		// An index by the name /debug/krt gives it.
		r.getJSON("/debug/krtz?collection="+graphs.NameProxiesByClass, &dump)
		if len(dump) != 1 {
			t.Fatalf("krtz of the index %+v", dump)
		}
		if code, body := r.get("/debug/krtz?collection=NoSuchThing"); code != 404 || !strings.Contains(body, "SliceEndpoints") {
			t.Fatalf("an unknown collection: %d %s", code, body)
		}
	})
	t.Run("endpointShardz", func(t *testing.T) {
		var shards map[string]map[string]struct {
			Shards          map[string][]map[string]any
			ServiceAccounts map[string]struct{}
		}
		pages.Await(t, rigs.Timeout, "the endpoint to be unhealthy in the shard", func() (bool, string) {
			r.getJSON("/debug/endpointShardz", &shards)
			eps := shards["foo.ns1.svc.cluster.local"]["ns1"].Shards["Kubernetes/Kubernetes"]
			return len(eps) == 1 && eps[0]["HealthStatus"] == float64(2) && eps[0]["ServicePortName"] == "http", fmt.Sprint(eps)
		})
		if _, ok := shards["foo.ns1.svc.cluster.local"]["ns1"].ServiceAccounts["spiffe://cluster.local/ns/ns1/sa/foo"]; !ok {
			t.Fatalf("service accounts %+v", shards)
		}
	})
	t.Run("registryz", func(t *testing.T) {
		var svcs []map[string]any
		r.getJSON("/debug/registryz", &svcs)
		if len(svcs) != 1 || svcs[0]["hostname"] != "foo.ns1.svc.cluster.local" {
			t.Fatalf("registryz %+v", svcs)
		}
		// istiod's protocol of a port named http.
		if p := svcs[0]["ports"].([]any)[0].(map[string]any)["protocol"]; p != "HTTP" {
			t.Fatalf("registryz protocol %v", p)
		}
	})
	t.Run("per-proxy pages", func(t *testing.T) {
		const id = "sidecar~10.0.0.9~client.ns1~ns1.svc.cluster.local"
		var clas []map[string]any
		r.getJSON("/debug/edsz?proxyID="+url.QueryEscape(id), &clas)
		if len(clas) != 1 || clas[0]["clusterName"] != cluster {
			t.Fatalf("edsz %+v", clas)
		}
		var dump map[string][]map[string]any
		r.getJSON("/debug/config_dump?proxyID="+url.QueryEscape(id), &dump)
		if len(dump["type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"]) != 1 {
			t.Fatalf("config_dump %+v", dump)
		}
		if code, _ := r.get("/debug/edsz?proxyID=nobody"); code != 404 {
			t.Fatalf("edsz of an unknown proxy: %d", code)
		}
		var conns struct {
			Total int `json:"totalClients"`
		}
		r.getJSON("/debug/connections", &conns)
		if conns.Total != 1 {
			t.Fatalf("connections %+v", conns)
		}
		var ps map[string]any
		r.getJSON("/debug/push_status", &ps)
		if ps["services"] != 1.0 {
			t.Fatalf("push_status %+v", ps)
		}
		var list []string
		r.getJSON("/debug/list", &list)
		if !slices.Contains(list, "/debug/edsz") || !slices.Contains(list, "/debug/krt") {
			t.Fatalf("list %v", list)
		}
	})
	t.Run("syncz", func(t *testing.T) {
		var st []map[string]any
		pages.Await(t, rigs.Timeout, "the NACK in syncz", func() (bool, string) {
			r.getJSON("/debug/syncz", &st)
			if len(st) != 1 {
				return false, fmt.Sprint(st)
			}
			res, _ := st[0]["resources"].(map[string]any)
			cla, _ := res[adsclient.TypeCLA].(map[string]any)
			return cla["lastError"] == "test rejection" && st[0]["endpoint_sent"] == second.Nonce && st[0]["endpoint_acked"] == first.Nonce, fmt.Sprint(st)
		})
		r.getJSON("/debug/syncz?namespace=other", &st)
		if len(st) != 0 {
			t.Fatalf("namespace filter: %+v", st)
		}
	})
	t.Run("adsz", func(t *testing.T) {
		var a struct {
			Total   int `json:"totalClients"`
			Clients []struct {
				Address string              `json:"address"`
				Watches map[string][]string `json:"watches"`
			} `json:"clients"`
		}
		r.getJSON("/debug/adsz", &a)
		if a.Total != 1 || a.Clients[0].Address != "10.0.0.9" || a.Clients[0].Watches[adsclient.TypeCLA][0] != cluster {
			t.Fatalf("adsz %+v", a)
		}
	})
	t.Run("memz", func(t *testing.T) {
		var m outputs.MemoryReport
		r.getJSON("/debug/memz", &m)
		held := map[string]int64{}
		for _, root := range m.Roots {
			held[root.Name] = root.Bytes
		}
		if m.Endpoints == 0 || m.Proxies != 1 || m.Subscriptions != 1 || m.PerEndpoint <= 0 || m.PerProxy <= 0 ||
			held["input/Pods"] == 0 || held[graphs.NameCLAs] == 0 || held["xDS server"] == 0 || len(m.Types) == 0 {
			t.Fatalf("memz %+v", m)
		}
	})
	t.Run("pprof", func(t *testing.T) {
		if code, _ := r.get("/debug/pprof/"); code != 200 {
			t.Fatalf("pprof %d", code)
		}
	})
	t.Run("metrics", func(t *testing.T) {
		want := []string{
			`krteds_xds_clients{proxy_type="sidecar"} 1`,
			`krteds_xds_pushes_total{type="ClusterLoadAssignment"} 2`,
			`krteds_xds_rejects_total{type="ClusterLoadAssignment"} 1`,
			`krteds_xds_convergence_seconds_count{type="ClusterLoadAssignment"} 1`,
			`krteds_xds_config_size_bytes_count{type="ClusterLoadAssignment"} 2`,
			`krteds_skipped_objects_total{kind="EndpointSlice",reason="invalid_address"} 1`,
			`krteds_collection_size{collection="SliceEndpoints"} 2`,
			`krteds_collection_recomputations_total{collection="SliceEndpoints"}`,
			`krteds_collection_events_total{collection="input/EndpointSlices"}`,
			`krteds_build_info{commit=`,
			// istiod's names for the same facts.
			`pilot_xds{version=""} 1`,
			`pilot_xds_pushes{type="eds"} 2`,
			`pilot_xds_pushes{type="cds_senderr"} 0`,
			`pilot_total_xds_rejects{type="eds"} 1`,
			`pilot_xds_expired_nonce{type="eds"}`,
			`pilot_xds_push_time_count{type="eds"} 2`,
			`pilot_proxy_convergence_time_count 1`,
			`pilot_services 1`,
			`pilot_k8s_endpoints_pending_pod 0`,
		}
		pages.Await(t, rigs.Timeout, "metrics", func() (bool, string) {
			_, body := r.get("/metrics")
			var missing []string
			for _, w := range want {
				if !strings.Contains(body, w) {
					missing = append(missing, w)
				}
			}
			return len(missing) == 0, fmt.Sprintf("missing %q", missing)
		})
	})
}

func TestDebugIsLoopbackOnly(t *testing.T) {
	r := startAppRig(t)
	h := r.DebugHandler()
	for path, want := range map[string]int{"/debug/krt": http.StatusForbidden, "/ready": http.StatusOK, "/healthz": http.StatusOK, "/metrics": http.StatusOK} {
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.RemoteAddr = "192.0.2.7:4444"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != want {
			t.Errorf("%s from a remote peer: %d, want %d", path, w.Code, want)
		}
	}
}

// TestMissingIstioCRDsDoNotStopKrteds runs over a client without the DestinationRule and Sidecar
// CRDs: the graph still syncs and serves, with those collections empty.
func TestMissingIstioCRDsDoNotStopKrteds(t *testing.T) {
	// The API server holds whole objects (the manifests source would reduce Pods).
	var ros []runtime.Object
	for _, doc := range strings.Split(appManifests, "\n---\n") {
		o, _, err := kube.IstioCodec.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("decoding %q: %v", doc, err)
		}
		ros = append(ros, o)
	}
	r := startAppRigWith(t, app.Options{Cluster: kube.NewFakeClient(ros...)})
	if n := len(r.Graph.DestinationRules.List()); n != 0 {
		t.Fatalf("%d DestinationRules without the CRD", n)
	}
	rigs.GraphOf(t, r.Graph).Await(t, "the service's CLA", func() (bool, string) {
		return r.Graph.CLAs.GetKey("outbound|80||foo.ns1.svc.cluster.local") != nil, "none"
	})
}

// TestGrafanaDashboardReadsKrtedsMetrics: every metric the bundled dashboard queries is one
// krteds exports (the pilot_* ones under istiod's names, so the dashboard reads istiod too).
func TestGrafanaDashboardReadsKrtedsMetrics(t *testing.T) {
	r := startAppRig(t)
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "deploy", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	families, err := r.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	// krteds_skipped_objects_total has a series only once something is skipped (its labels are
	// the kinds and reasons met).
	exported := map[string]bool{"krteds_skipped_objects_total": true}
	for _, f := range families {
		exported[f.GetName()] = true
	}
	metric := regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\{`)
	n := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, m := range metric.FindAllStringSubmatch(tg.Expr, -1) {
				name := strings.TrimSuffix(m[1], "_bucket")
				n++
				if !exported[name] {
					t.Errorf("panel %q queries %s, which krteds does not export", p.Title, name)
				}
			}
		}
	}
	if n < 8 {
		t.Fatalf("only %d metric references found", n)
	}
}
