package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
	"github.com/krteds/krteds/transforms/eds"
)

// ledsMesh is one service of n pods over three zones, in slices of 100 endpoints.
func ledsMesh(n int, ready func(i int) bool) []any {
	objs := []any{
		fixtures.ZoneNode("n0", "r1", "z0"), fixtures.ZoneNode("n1", "r1", "z1"), fixtures.ZoneNode("n2", "r1", "z2"),
		fixtures.Service("big", "big", fixtures.HTTP...),
	}
	for i := 0; i < n; i++ {
		objs = append(objs, fixtures.Pod("big", fmt.Sprintf("big-%d", i), "big", ledsIP(i), fmt.Sprintf("n%d", i%3)))
	}
	for s := 0; s*100 < n; s++ {
		objs = append(objs, ledsSlice(s, n, ready))
	}
	return objs
}

func ledsIP(i int) string { return fmt.Sprintf("10.8.%d.%d", i/250, i%250+1) }

func ledsSlice(s, n int, ready func(i int) bool) *discoveryv1.EndpointSlice {
	var eps []fixtures.Endpoint
	for i := s * 100; i < min(n, (s+1)*100); i++ {
		c := fixtures.Ready
		if !ready(i) {
			c = fixtures.NotReady
		}
		eps = append(eps, fixtures.Endpoint{IP: ledsIP(i), Pod: fmt.Sprintf("big-%d", i), Cond: c})
	}
	return fixtures.Slice("big", "big-"+strconv.Itoa(s), "big", fixtures.HTTPSlice, eps...)
}

// ledsFollower is an Envoy-like delta client of the service's cluster: with LEDS it subscribes
// to the collections the CLA names. It counts the bytes of the responses it receives (their
// encoded size) and the responses of each type.
type ledsFollower struct {
	s               *adsclient.DeltaStream
	bytes           atomic.Int64
	clas, endpoints atomic.Int64
	resources       atomic.Int64
	received        chan struct{}
}

// A follower decodes a CLA only when LEDS is on (to find its collections): the figures are the
// server's and the wire's, not the decoding a client does.
func followLEDS(ctx context.Context, b *testing.B, cc *grpc.ClientConn, i int, cluster string, leds bool) *ledsFollower {
	s, err := adsclient.OpenDelta(ctx, cc, adsclient.Node{ID: fmt.Sprintf("sidecar~10.9.%d.%d~p%d.big~big.svc.cluster.local", i/250, i%250+1, i), Namespace: "big"})
	if err != nil {
		b.Fatal(err)
	}
	f := &ledsFollower{s: s, received: make(chan struct{}, 1024)}
	if err := s.Subscribe(adsclient.TypeCLA, []string{cluster}, nil); err != nil {
		b.Fatal(err)
	}
	go func() {
		held := map[string]bool{}
		for {
			resp, err := s.Recv(time.Hour)
			if err != nil {
				return
			}
			f.bytes.Add(int64(proto.Size(resp)))
			f.resources.Add(int64(len(resp.Resources) + len(resp.RemovedResources)))
			switch resp.TypeUrl {
			case adsclient.TypeCLA:
				f.clas.Add(1)
				if !leds {
					_ = s.Ack(resp)
					break
				}
				var cla endpoint.ClusterLoadAssignment
				if err := resp.Resources[0].Resource.UnmarshalTo(&cla); err != nil {
					return
				}
				var sub []string
				for _, l := range cla.Endpoints {
					if g := l.GetLedsClusterLocalityConfig().GetLedsCollectionName(); g != "" && !held[g] {
						held[g] = true
						sub = append(sub, g)
					}
				}
				_ = s.Ack(resp)
				if len(sub) > 0 {
					_ = s.Subscribe(eds.TypeLbEndpoint, sub, nil)
				}
			case eds.TypeLbEndpoint:
				f.endpoints.Add(1)
				_ = s.Ack(resp)
			}
			f.received <- struct{}{}
		}
	}()
	return f
}

// totalAlloc is the bytes allocated by the process so far.
func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// BenchmarkLEDSFlip compares, for one service of KRTEDS_BENCH_LEDS_ENDPOINTS endpoints (5 000)
// followed by KRTEDS_BENCH_LEDS_CLIENTS Envoy-like delta clients (20), an endpoint's health flip sent as the whole CLA
// (cla) and as LEDS (leds): bytes on the wire per client, time until every client has it, and
// the process's CPU and allocations per flip (krteds and the clients).
func BenchmarkLEDSFlip(b *testing.B) {
	n := 5000
	if v, err := strconv.Atoi(os.Getenv("KRTEDS_BENCH_LEDS_ENDPOINTS")); err == nil && v > 0 {
		n = v
	}
	clients := 20
	if v, err := strconv.Atoi(os.Getenv("KRTEDS_BENCH_LEDS_CLIENTS")); err == nil && v > 0 {
		clients = v
	}
	cluster := "outbound|80||big.big.svc.cluster.local"
	for _, mode := range []struct {
		name      string
		threshold int
	}{{"cla", 0}, {"leds", 1000}} {
		b.Run(mode.name, func(b *testing.B) {
			stop := make(chan struct{})
			defer close(stop)
			cfg := collections.DefaultConfig()
			cfg.LEDSThreshold = mode.threshold
			g := rigs.NewGraphWith(b, rigs.GraphOptions{Config: cfg, Stop: stop, NoDebugger: true, NoWait: true}, ledsMesh(n, func(int) bool { return true })...)
			in := g.In
			s := serveGraph(b, g)
			defer s.Close()
			cc, err := adsclient.Dial(s.Addr)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			fs := make([]*ledsFollower, clients)
			for i := range fs {
				fs[i] = followLEDS(ctx, b, cc, i, cluster, mode.threshold > 0)
			}
			// Every client holds every endpoint: the whole CLA, or every collection's members.
			wantResources := int64(1)
			if mode.threshold > 0 {
				wantResources = int64(1 + n)
			}
			deadline := time.Now().Add(5 * time.Minute)
			for _, f := range fs {
				for f.resources.Load() < wantResources {
					if time.Now().After(deadline) {
						b.Fatalf("a client holds %d resources, want %d", f.resources.Load(), wantResources)
					}
					select {
					case <-f.received:
					case <-time.After(time.Until(deadline)):
					}
				}
			}
			ready := make([]bool, n)
			for i := range ready {
				ready[i] = true
			}
			var bytes, wall int64
			b.ResetTimer()
			cpu0, alloc0 := cpuTime(), totalAlloc()
			for it := 0; it < b.N; it++ {
				e := (it * 37) % n
				ready[e] = !ready[e]
				before := make([]int64, clients)
				for i, f := range fs {
					before[i] = f.bytes.Load()
					for len(f.received) > 0 {
						<-f.received
					}
				}
				counts := make([]int64, clients)
				for i, f := range fs {
					counts[i] = f.clas.Load() + f.endpoints.Load()
				}
				start := time.Now()
				in.Apply(ledsSlice(e/100, n, func(i int) bool { return ready[i] }), false)
				var wg sync.WaitGroup
				for i, f := range fs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for f.clas.Load()+f.endpoints.Load() == counts[i] {
							select {
							case <-f.received:
							case <-time.After(time.Minute):
								b.Errorf("client %d never received flip %d", i, it)
								return
							}
						}
					}()
				}
				wg.Wait()
				if b.Failed() {
					b.FailNow()
				}
				wall += int64(time.Since(start))
				for i, f := range fs {
					bytes += f.bytes.Load() - before[i]
				}
			}
			b.StopTimer()
			cpu, alloc := cpuTime()-cpu0, totalAlloc()-alloc0
			b.ReportMetric(float64(bytes)/float64(b.N*clients), "wire-B/flip/client")
			b.ReportMetric(float64(wall)/float64(b.N)/1e6, "converge-ms/flip")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/1e3, "cpu-ms/flip")
			b.ReportMetric(float64(alloc)/float64(b.N), "alloc-B/flip")
			b.ReportMetric(0, "ns/op")
			var resp strings.Builder
			for _, f := range fs[:1] {
				fmt.Fprintf(&resp, "CLAs %d, LEDS responses %d", f.clas.Load(), f.endpoints.Load())
			}
			b.Logf("%s, %d endpoints: client 0 received %s", mode.name, n, resp.String())
		})
	}
}
