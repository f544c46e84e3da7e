package fleet

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

const fooCluster = "outbound|80||foo.ns1.svc.cluster.local"

func mesh(c3 discovery.EndpointConditions) []any {
	return []any{
		fixtures.ZoneNode("n1", "r1", "z1"),
		fixtures.Service("ns1", "foo", fixtures.HTTP...),
		fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", "n1"),
		fixtures.Pod("ns1", "foo-2", "foo", "10.0.0.2", "n1"),
		fixtures.Pod("ns1", "foo-3", "foo", "10.0.0.3", "n1"),
		fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
			fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
			fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.Ready},
			fixtures.Endpoint{IP: "10.0.0.3", Pod: "foo-3", Cond: c3}),
	}
}

// recorder is a holder that keeps everything, for the tests.
type recorder struct {
	w  *fixtures.Waker
	mu sync.Mutex
	// held is, by name, the version held and its healthy endpoints (-1: no body).
	held    map[string]string
	healthy map[string]int
	opened  []map[string]string
	breaks  []Break
}

func newRecorder() *recorder {
	return &recorder{w: fixtures.NewWaker(), held: map[string]string{}, healthy: map[string]int{}}
}

func (r *recorder) Held() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held) == 0 {
		return nil
	}
	return maps.Clone(r.held)
}

func (r *recorder) Opened(held map[string]string) {
	r.mu.Lock()
	r.opened = append(r.opened, held)
	r.mu.Unlock()
	r.w.Wake()
}

func (r *recorder) Received(resp *Response) {
	r.mu.Lock()
	for k := range resp.Len() {
		name, v, body := resp.Resource(k)
		r.held[name] = v
		r.healthy[name] = -1
		if body != nil {
			_, set, err := DecodeCLA(body)
			if err != nil {
				panic(err)
			}
			r.healthy[name] = len(set)
		}
	}
	for _, name := range resp.Removed() {
		delete(r.held, name)
	}
	r.mu.Unlock()
	r.w.Wake()
}

func (r *recorder) Broke(b Break) {
	r.mu.Lock()
	r.breaks = append(r.breaks, b)
	r.mu.Unlock()
	r.w.Wake()
}

func (r *recorder) await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	r.w.Await(t, 10*time.Second, what, func() (bool, string) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return cond(), fmt.Sprintf("held %v, opened %v, breaks %+v", r.held, r.opened, r.breaks)
	})
}

// TestAProxyMovesBetweenReplicas: delta and state-of-the-world proxies, with bodies and without,
// hold their CLA, move to the next replica when theirs stops (a delta one saying what it holds,
// a state-of-the-world one its version), come back to a replica at a new address when moved, and
// follow a change there.
func TestAProxyMovesBetweenReplicas(t *testing.T) {
	for _, bodies := range []bool{true, false} {
		t.Run(fmt.Sprintf("bodies=%v", bodies), func(t *testing.T) {
			s0 := rigs.Serve(t, rigs.NewGraph(t, mesh(fixtures.Ready)...), rigs.ServeOptions{})
			s1 := rigs.Serve(t, rigs.NewGraph(t, mesh(fixtures.Ready)...), rigs.ServeOptions{})
			f := New(Options{Addrs: []string{s0.Addr, s1.Addr}, Bodies: bodies, Backoff: QuickBackoff})
			defer f.Close()
			var recs []*recorder
			for i, delta := range []bool{true, false} {
				r := newRecorder()
				recs = append(recs, r)
				node := adsclient.Node{ID: fmt.Sprintf("sidecar~10.9.0.%d~app-%d.ns1~ns1.svc.cluster.local", i+1, i), Namespace: "ns1"}
				if _, err := f.Add(Spec{Node: node, Delta: delta, Subs: []string{fooCluster}, Holder: r}); err != nil {
					t.Fatal(err)
				}
			}
			f.Start()
			wantHealthy := func(r *recorder, n int) int {
				if bodies || !f.Proxies()[slices.Index(recs, r)].Delta() {
					return n
				}
				return -1 // a delta proxy without bodies
			}
			var first []string
			for _, r := range recs {
				r.await(t, "the CLA held", func() bool { return r.held[fooCluster] != "" && r.healthy[fooCluster] == wantHealthy(r, 3) })
				first = append(first, r.held[fooCluster])
			}
			if first[0] != first[1] {
				t.Errorf("delta and state of the world hold versions %v: a version is the hash of the CLA's bytes", first)
			}
			s0.Close()
			for k, r := range recs {
				r.await(t, "moved to replica 1", func() bool {
					return len(r.breaks) > 0 && r.breaks[0].From == 0 && r.breaks[0].To == 1 && !r.breaks[0].Planned && len(r.opened) >= 2
				})
				r.mu.Lock()
				resumed := r.opened[len(r.opened)-1]
				r.mu.Unlock()
				if delta := k == 0; delta && resumed[fooCluster] != first[0] {
					t.Errorf("the delta proxy resumed saying it held %v, want %s", resumed, first[0])
				}
			}
			// Replica 0 comes back elsewhere, with foo-3 not ready; the proxies are moved home.
			s2 := rigs.Serve(t, rigs.NewGraph(t, mesh(fixtures.NotReady)...), rigs.ServeOptions{})
			f.SetAddr(0, s2.Addr)
			for _, p := range f.Proxies() {
				p.MoveTo(0)
			}
			for _, r := range recs {
				r.await(t, "moved home, holding the new state", func() bool {
					b := r.breaks[len(r.breaks)-1]
					return b.Planned && b.To == 0 && r.held[fooCluster] != first[0] && r.healthy[fooCluster] == wantHealthy(r, 2)
				})
			}
			for _, p := range f.Proxies() {
				if p.Moving() || p.Replica() != 0 {
					t.Errorf("proxy %d: moving %v, on replica %d", p.Index(), p.Moving(), p.Replica())
				}
			}
			if f.Responses.Load() < 4 || f.Resources.Load() < 4 || f.Bytes.Load() == 0 || f.Retries.Load() < 4 {
				t.Errorf("counted %d responses, %d resources, %d bytes, %d retries", f.Responses.Load(), f.Resources.Load(), f.Bytes.Load(), f.Retries.Load())
			}
		})
	}
}

// TestWithoutBackoffAProxyStops: a proxy with no backoff subscribes to more once served, and stops
// when its stream breaks, its holder told why.
func TestWithoutBackoffAProxyStops(t *testing.T) {
	for _, delta := range []bool{true, false} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) {
			objs := append(mesh(fixtures.Ready), fixtures.Service("ns1", "bar", fixtures.HTTP...), fixtures.Pod("ns1", "bar-1", "bar", "10.0.1.1", "n1"),
				fixtures.Slice("ns1", "bar-a", "bar", fixtures.HTTPSlice, fixtures.Endpoint{IP: "10.0.1.1", Pod: "bar-1", Cond: fixtures.Ready}))
			s := rigs.Serve(t, rigs.NewGraph(t, objs...), rigs.ServeOptions{})
			f := New(Options{Addrs: []string{s.Addr}, InTurn: true})
			defer f.Close()
			r := newRecorder()
			p, err := f.Add(Spec{Node: adsclient.Node{ID: "sidecar~10.9.0.1~app-1.ns1~ns1.svc.cluster.local", Namespace: "ns1"}, Delta: delta, Subs: []string{fooCluster}, Holder: r})
			if err != nil {
				t.Fatal(err)
			}
			f.Start()
			r.await(t, "foo held", func() bool { return r.held[fooCluster] != "" })
			bar := strings.Replace(fooCluster, "foo", "bar", 1)
			if err := p.Subscribe(bar); err != nil {
				t.Fatal(err)
			}
			r.await(t, "bar held too", func() bool { return r.held[bar] != "" && r.held[fooCluster] != "" })
			s.Close()
			r.await(t, "the break told", func() bool { return len(r.breaks) == 1 && r.breaks[0].Err != nil })
			// The barrier: the proxy's loop has returned without closing the fleet, so it opens no
			// stream after this one.
			select {
			case <-p.Ended():
			case <-time.After(10 * time.Second):
				t.Fatal("the proxy goes on after its stream broke, without a backoff")
			}
			r.mu.Lock()
			defer r.mu.Unlock()
			if len(r.opened) != 1 || len(r.breaks) != 1 || f.Retries.Load() != 0 {
				t.Errorf("opened %d streams, broke %d, %d retries: want one, no retry", len(r.opened), len(r.breaks), f.Retries.Load())
			}
		})
	}
}
