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

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	dto "github.com/prometheus/client_model/go"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs"
	"github.com/krteds/krteds/outputs/history"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

// The history of a cluster's endpoints, end to end: manifests changed on disk, a proxy over ADS
// acknowledging what it is sent, /debug/explain?history=1 and the network programming latency.

const historyCluster = "outbound|9080||reviews.shop.svc.cluster.local"

const historyMesh = `apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: Service
metadata: {name: reviews, namespace: shop}
spec:
  clusterIP: 10.96.2.10
  ports: [{name: grpc, port: 9080}]
`

func historyPod(name, ip string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: shop, labels: {app: reviews}}
spec: {nodeName: node-a}
status:
  phase: Running
  podIP: %s
  conditions: [{type: Ready, status: "True"}]
`, name, ip)
}

// historySlice is the reviews slice with its second endpoint ready or not, stamped with a
// trigger time when one is given (the EndpointSlice controller's annotation).
func historySlice(secondReady bool, trigger time.Time) string {
	ann := ""
	if !trigger.IsZero() {
		ann = fmt.Sprintf("  annotations: {%s: %q}\n", collections.AnnotationTriggerTime, trigger.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Sprintf(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-a
  namespace: shop
  labels: {kubernetes.io/service-name: reviews}
%saddressType: IPv4
ports: [{name: grpc, port: 9080}]
endpoints:
- addresses: [10.10.1.11]
  conditions: {ready: true}
  targetRef: {kind: Pod, namespace: shop, name: reviews-1}
- addresses: [10.10.1.12]
  conditions: {ready: %t, serving: %t, terminating: false}
  targetRef: {kind: Pod, namespace: shop, name: reviews-2}
`, ann, secondReady, secondReady)
}

type historyRig struct {
	t    *testing.T
	dir  string
	app  *rigs.App
	node adsclient.Node
	clas chan string // the endpoints (address:health) of each CLA the proxy acknowledged
}

// startHistory serves a folder of the mesh above and connects a proxy that acknowledges every
// CLA of reviews it is sent.
func startHistory(t *testing.T) *historyRig {
	dir := t.TempDir()
	h := &historyRig{t: t, dir: dir, clas: make(chan string, 100),
		node: adsclient.Node{ID: "sidecar~10.10.0.11~frontend-1.shop~shop.svc.cluster.local", Namespace: "shop"}}
	h.write("00-mesh.yaml", historyMesh)
	h.write("10-pods.yaml", historyPod("reviews-1", "10.10.1.11")+"---\n"+historyPod("reviews-2", "10.10.1.12"))
	h.write("20-slice.yaml", historySlice(true, time.Time{}))
	h.app = rigs.StartApp(t, app.Options{Config: collections.DefaultConfig(), Manifests: dir, DebugListener: rigs.Listen(t)})
	h.app.AwaitSynced()
	cc, err := adsclient.Dial(h.app.XDSAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := adsclient.Open(ctx, cc, h.node)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Request(adsclient.TypeCLA, historyCluster); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			resp, err := s.Recv(time.Minute)
			if err != nil {
				return
			}
			h.clas <- claEndpoints(resp)
			if s.Ack(resp, historyCluster) != nil {
				return
			}
		}
	}()
	h.await("the first CLA", "10.10.1.11:HEALTHY,10.10.1.12:HEALTHY")
	return h
}

func (h *historyRig) write(name, body string) {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(h.dir, name), []byte(body), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// await waits for the proxy to acknowledge a CLA of these endpoints.
func (h *historyRig) await(what, want string) {
	h.t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case got := <-h.clas:
			if got == want {
				return
			}
		case <-deadline:
			h.t.Fatalf("%s: no CLA of %s", what, want)
		}
	}
}

func claEndpoints(resp *discovery.DiscoveryResponse) string {
	clas, err := adsclient.CLAs(resp)
	if err != nil || len(clas) != 1 {
		return fmt.Sprint("bad response: ", err)
	}
	var out []string
	for _, l := range clas[0].Endpoints {
		for _, e := range l.LbEndpoints {
			out = append(out, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()+":"+e.GetHealthStatus().String())
		}
	}
	return strings.Join(out, ",")
}

// explainHistory asks /debug/explain with the history, for the proxy and an endpoint.
func (h *historyRig) explainHistory(endpoint string) outputs.ExplainedHistory {
	h.t.Helper()
	u := fmt.Sprintf("http://%s/debug/explain?proxyID=%s&cluster=%s&endpoint=%s&history=1", h.app.DebugAddr,
		url.QueryEscape(h.node.ID), url.QueryEscape(historyCluster), endpoint)
	resp, err := http.Get(u)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		h.t.Fatalf("%s: %s %s", u, resp.Status, body)
	}
	var ex outputs.ExplainedHistory
	if err := json.Unmarshal(body, &ex); err != nil || ex.History == nil {
		h.t.Fatalf("%s: %v\n%s", u, err, body)
	}
	return ex
}

// programming is the sample count and sum of a stage of krteds_network_programming_duration_seconds.
func (h *historyRig) programming(stage string) (uint64, float64) {
	h.t.Helper()
	mfs, err := h.app.Registry.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "krteds_network_programming_duration_seconds" {
			continue
		}
		for _, m := range mf.Metric {
			if label(m, "stage") == stage && label(m, "kind") == "EndpointSlice" {
				return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// find is the latest event whose text holds s.
// explainHistoryWith asks explain's history of an endpoint until its timeline has an event
// saying each of texts: the record follows the graph's collections through handlers of its own,
// which may run after the proxy has been sent its CLA.
func (h *historyRig) explainHistoryWith(endpoint string, texts ...string) outputs.ExplainedHistory {
	h.t.Helper()
	var ex outputs.ExplainedHistory
	fixtures.Polling("the record signals nothing outside the process").Await(h.t, 10*time.Second, "the history saying "+strings.Join(texts, "; "), func() (bool, string) {
		ex = h.explainHistory(endpoint)
		if ex.History == nil {
			return false, "no history"
		}
		for _, s := range texts {
			if !slices.ContainsFunc(ex.History.Events, func(e history.Event) bool { return strings.Contains(e.Text, s) }) {
				return false, "no event says " + s
			}
		}
		return true, ""
	})
	return ex
}

func find(t *testing.T, tl *history.Timeline, s string) history.Event {
	t.Helper()
	for i := len(tl.Events) - 1; i >= 0; i-- {
		if e := tl.Events[i]; strings.Contains(e.Text, s) {
			return e
		}
	}
	t.Fatalf("no event says %q:\n%s", s, tl.Text())
	return history.Event{}
}

// TestAReadinessFlipsTimeline: an endpoint made not ready (the slice written with the trigger
// time the EndpointSlice controller stamps): its timeline has every stage, in order (the change,
// krteds seeing it, computing the CLA, the proxy acknowledging it), and agrees with the network
// programming latency krteds measured for it, stage by stage.
func TestAReadinessFlipsTimeline(t *testing.T) {
	h := startHistory(t)
	trigger := time.Now().Truncate(time.Microsecond) // the controller stamps the Pod's change
	h.write("20-slice.yaml", historySlice(false, trigger))
	h.await("the flip", "10.10.1.11:HEALTHY,10.10.1.12:UNHEALTHY")
	fixtures.Polling("a histogram signals nothing").Await(t, 10*time.Second, "the flip measured", func() (bool, string) {
		n, _ := h.programming("total")
		return n == 1, fmt.Sprint(n, " samples")
	})
	tl := h.explainHistoryWith("10.10.1.12", "computed: 10.10.1.12:9080 (Pod shop/reviews-2) Healthy → UnHealthy", "acknowledged by 1 proxy ").History
	changed := find(t, tl, "EndpointSlice shop/reviews-a: the Pod or Service change behind it (its trigger time)")
	seen := find(t, tl, "EndpointSlice shop/reviews-a seen by krteds")
	computed := find(t, tl, "computed: 10.10.1.12:9080 (Pod shop/reviews-2) Healthy → UnHealthy")
	acked := find(t, tl, "acknowledged by 1 proxy ")
	if !changed.At.Equal(trigger) {
		t.Errorf("the change is at %v, the slice's trigger time is %v", changed.At, trigger)
	}
	for i, e := range []history.Event{changed, seen, computed, acked} {
		if i > 0 && e.At.Before([]history.Event{changed, seen, computed, acked}[i-1].At) {
			t.Errorf("out of order: %q at %v", e.Text, e.At)
		}
	}
	_, total := h.programming("total")
	_, cluster := h.programming("cluster")
	if want := acked.At.Sub(trigger).Seconds(); abs(total-want) > 1e-6 {
		t.Errorf("the histogram's total is %vs, the timeline's trigger → ACK %vs", total, want)
	}
	if want := seen.At.Sub(trigger).Seconds(); abs(cluster-want) > 1e-6 {
		t.Errorf("the histogram's cluster stage is %vs, the timeline's trigger → seen %vs", cluster, want)
	}
	for _, stage := range []string{"compute", "send", "proxy"} {
		if n, _ := h.programming(stage); n != 1 {
			t.Errorf("stage %s observed %d times", stage, n)
		}
	}
	if p := tl.Proxies; p.Subscribed != 1 || p.Current != 1 || p.Asked == nil || p.Asked.Holds != p.Asked.Current || !p.Asked.Acked {
		t.Errorf("where the proxies stand: %+v", p)
	}
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}

// TestAPodDeletedWhileItsSliceSaysReady: the Pod of an endpoint goes while the slice still lists
// it ready; the endpoint is withheld, and explain says so with both times: when the slice's
// version was made and seen, and when the Pod was seen gone, then the CLA computed again.
func TestAPodDeletedWhileItsSliceSaysReady(t *testing.T) {
	h := startHistory(t)
	h.write("10-pods.yaml", historyPod("reviews-1", "10.10.1.11"))
	h.await("the Pod gone", "10.10.1.11:HEALTHY")
	ex := h.explainHistoryWith("10.10.1.12", "Pod shop/reviews-2 seen gone", "computed again without a new EndpointSlice version")
	if len(ex.Endpoints) != 1 || ex.Endpoints[0].Sent || !strings.Contains(ex.Endpoints[0].Reason, "targetRef Pod shop/reviews-2 is not in the Pod collection") {
		t.Fatalf("the verdict: %+v", ex.Endpoints)
	}
	tl := ex.History
	slice := find(t, tl, "EndpointSlice shop/reviews-a seen by krteds")
	gone := find(t, tl, "Pod shop/reviews-2 seen gone")
	again := find(t, tl, "computed again without a new EndpointSlice version")
	if !strings.Contains(again.Text, "10.10.1.12:9080 (Pod shop/reviews-2) removed") {
		t.Errorf("the change says %q", again.Text)
	}
	if !(slice.At.Before(gone.At) && !again.At.Before(gone.At)) {
		t.Errorf("out of order: slice seen %v, Pod gone %v, computed again %v", slice.At, gone.At, again.At)
	}
	if n, _ := h.programming("total"); n != 0 {
		t.Errorf("a Pod going away measured as the slice's programming: %d samples", n)
	}
}
