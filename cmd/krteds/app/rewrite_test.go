package app_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

// rolloutFile is generation g of a service's file: n Pods named and addressed for the
// generation, all ready, and the slice naming them.
func rolloutFile(g, n int) (string, []string) {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n---\n")
	b.WriteString("apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n" +
		"spec: {clusterIP: 10.96.0.20, ports: [{name: http, port: 80, targetPort: 8080}], selector: {app: web}}\n")
	var ips []string
	var eps strings.Builder
	for i := 0; i < n; i++ {
		ip := fmt.Sprintf("10.20.%d.%d", g, i+1)
		ips = append(ips, ip)
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Pod\nmetadata: {name: web-g%d-%d, namespace: shop, labels: {app: web}}\n"+
			"spec: {serviceAccountName: web}\nstatus: {phase: Running, podIP: %s, conditions: [{type: Ready, status: \"True\"}]}\n", g, i, ip)
		fmt.Fprintf(&eps, "- addresses: [%s]\n  conditions: {ready: true}\n  targetRef: {kind: Pod, name: web-g%d-%d, namespace: shop}\n", ip, g, i)
	}
	b.WriteString("---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-a, namespace: shop, labels: {kubernetes.io/service-name: web}}\n" +
		"addressType: IPv4\nports: [{name: http, port: 8080}]\nendpoints:\n" + eps.String())
	slices.Sort(ips)
	return b.String(), ips
}

// TestFileRewriteNeverServesAPartialCLA: a service's file is replaced by write-then-rename, each
// time with every pod renamed and readdressed (a rollout written at once). A client records every
// response: each must hold exactly one whole generation's endpoints, never a mix, a part or none,
// although the Pods and the slice reach the graph as separate changes. Small files are written
// object by object, larger ones as batches; both are covered.
func TestFileRewriteNeverServesAPartialCLA(t *testing.T) {
	for _, pods := range []int{3, 40} {
		t.Run(fmt.Sprintf("%d pods", pods), func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "web.yaml")
			write := func(g int) []string {
				content, ips := rolloutFile(g, pods)
				tmp := filepath.Join(dir, ".web.yaml.tmp")
				if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, file); err != nil {
					t.Fatal(err)
				}
				return ips
			}
			gens := map[string]int{}
			key := func(ips []string) string { return strings.Join(ips, ",") }
			gens[key(write(0))] = 0

			a := rigs.StartApp(t, app.Options{Config: collections.DefaultConfig(), Manifests: dir})
			cc, err := adsclient.Dial(a.XDSAddr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cc.Close() })
			st, err := adsclient.Open(context.Background(), cc,
				adsclient.Node{ID: "sidecar~10.9.9.9~client.shop~shop.svc.cluster.local", Namespace: "shop"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(st.Close)
			const cluster = "outbound|80||web.shop.svc.cluster.local"
			if err := st.Request(adsclient.TypeCLA, cluster); err != nil {
				t.Fatal(err)
			}

			// The client's receive loop wakes the waits after each response.
			var mu sync.Mutex
			received := fixtures.NewWaker()
			var seen []string // every response's endpoints, in order
			go func() {
				for {
					resp, err := st.Recv(time.Minute)
					if err != nil {
						return
					}
					clas, err := adsclient.CLAs(resp)
					if err != nil || len(clas) != 1 {
						t.Errorf("response %v: %d CLAs, %v", resp.VersionInfo, len(clas), err)
						return
					}
					var ips []string
					for _, l := range clas[0].Endpoints {
						for _, e := range l.LbEndpoints {
							ips = append(ips, e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
						}
					}
					slices.Sort(ips)
					mu.Lock()
					seen = append(seen, key(ips))
					mu.Unlock()
					received.Wake()
					_ = st.Ack(resp, cluster)
				}
			}()
			waitGen := func(want string) {
				t.Helper()
				received.Await(t, 20*time.Second, "the client to receive "+want, func() (bool, string) {
					mu.Lock()
					defer mu.Unlock()
					return len(seen) > 0 && seen[len(seen)-1] == want, fmt.Sprintf("last %d responses: %v", min(len(seen), 3), seen[max(0, len(seen)-3):])
				})
			}
			waitGen(key(mustIPs(rolloutFile(0, pods))))
			for g := 1; g <= 15; g++ {
				k := key(write(g))
				gens[k] = g
				waitGen(k)
			}
			mu.Lock()
			defer mu.Unlock()
			for i, s := range seen {
				if _, whole := gens[s]; !whole {
					t.Errorf("response %d of %d holds no whole generation of the file: %s", i+1, len(seen), s)
				}
			}
		})
	}
}

func mustIPs(_ string, ips []string) []string { return ips }
