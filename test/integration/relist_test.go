package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/kube"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	krteds "github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
)

// cutProxy forwards TCP to target until cut: then it drops every connection and refuses new ones
// until restored.
type cutProxy struct {
	lis    net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{lis: lis, target: target}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			p.mu.Lock()
			if p.cut {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				p.mu.Unlock()
				_ = c.Close()
				continue
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	t.Cleanup(func() { _ = lis.Close(); p.setCut(true) })
	return p
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}

// etcdCall posts to etcd's JSON gateway.
func etcdCall(path string, body any) (map[string]any, error) {
	b, _ := json.Marshal(body)
	resp, err := http.Post("http://127.0.0.1:"+etcdPort+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, err
	}
	if resp.StatusCode != 200 {
		return out, fmt.Errorf("etcd %s: %s %v", path, resp.Status, out)
	}
	return out, nil
}

// compactEtcd compacts etcd's history up to its current revision: any watch resuming from an
// older resource version is then told "too old resource version".
func compactEtcd(t *testing.T) {
	t.Helper()
	r, err := etcdCall("/v3/kv/range", map[string]any{"key": "L3JlZ2lzdHJ5"}) // "/registry"
	if err != nil {
		t.Fatal(err)
	}
	rev, _ := r["header"].(map[string]any)["revision"].(string)
	if rev == "" {
		t.Fatalf("no revision in %v", r)
	}
	if _, err := etcdCall("/v3/kv/compaction", map[string]any{"revision": rev, "physical": true}); err != nil {
		t.Fatal(err)
	}
}

// TestTooOldResourceVersionRelists cuts krteds off the API server, changes Pods, compacts etcd
// and lets krteds reconnect: its watches resume from compacted resource versions, the API server
// answers "too old resource version", the informers relist, and no update is lost.
func TestTooOldResourceVersionRelists(t *testing.T) {
	needAPIServer(t)
	c := client(t)
	const ns, n = "scenario4", 4
	mesh(t, c, ns, n)

	rc, err := kube.DefaultRestConfig(kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	proxy := newCutProxy(t, strings.TrimPrefix(rc.Host, "https://"))
	rc.Host = "https://" + proxy.lis.Addr().String()
	viaProxy, err := kube.NewClient(kube.NewClientConfigForRestConfig(rc), cluster.ID("Kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	app, err := krteds.Start(krteds.Options{Config: collections.DefaultConfig(), Cluster: viaProxy, XDSListener: lis})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newWatcher()
	addr := lis.Addr().String()
	go follow(ctx, func() string { return addr }, "outbound|80||web."+ns+".svc.cluster.local", w)
	waitHealthy(t, w, ips(0, 1, 2, 3))

	// A resource version krteds' informers have seen.
	before, err := c.Kube().DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	proxy.setCut(true)
	// While krteds cannot see the API server: pods 1 and 3 stop being ready.
	setPod(t, c, ns, 1, false)
	setPod(t, c, ns, 3, false)
	waitSlices(t, c, ns, 2)
	compactEtcd(t)
	// The precondition: resuming a watch from that version is now "too old".
	wt, err := c.Kube().DiscoveryV1().EndpointSlices(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})
	if err == nil {
		ev := <-wt.ResultChan()
		wt.Stop()
		st, ok := ev.Object.(*metav1.Status)
		if ev.Type != watch.Error || !ok || st.Code != http.StatusGone {
			t.Fatalf("a watch from resource version %s after compaction gave %v %v, want 410 Gone", before.ResourceVersion, ev.Type, ev.Object)
		}
	} else if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
		t.Fatalf("a watch from resource version %s after compaction: %v, want 410 Gone", before.ResourceVersion, err)
	}
	proxy.setCut(false)
	waitHealthy(t, w, ips(0, 2))
}

// etcdPort is the client port of the test etcd (set by TestMain).
var etcdPort string
