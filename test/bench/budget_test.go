package bench

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs"
	"github.com/krteds/krteds/outputs/memz"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

// settledHeap is the least of a few live-heap readings: when every proxy holds every CLA, the
// last ACKs may still be in flight, and their buffers are not part of what connecting costs.
func settledHeap() uint64 {
	least := fixtures.LiveHeap()
	for i := 0; i < 4; i++ {
		least = min(least, fixtures.LiveHeap())
	}
	return least
}

// budget is the memory of krteds over a mesh: the heap measured around it and the attribution of
// that heap to the graph's collections, the xDS server and the in-process clients.
type budget struct {
	size Size
	// graphHeap is the live heap the inputs and the graph added; proxyHeap what connecting the
	// proxies added (server and in-process clients).
	graphHeap, proxyHeap int64
	graph, proxies       memz.Report
	// server is the part of proxies held by the xDS server (not the clients).
	server int64
	subs   int
}

// measureBudget loads the mesh into static inputs (objects reduced as the informers reduce
// them), waits for every CLA, measures, then connects the proxies and measures again. A tiny
// mesh goes through the same steps first, so that process-wide state initialised on first use
// (protobuf's type metadata for every xDS message, krt's and gRPC's registries) is in place
// before the heap is measured.
func measureBudget(tb testing.TB, size Size) budget {
	measureMesh(tb, Size{Name: "warm-up", Services: 10, EndpointsPerService: 2, Nodes: 2, Zones: 2, Regions: 1, Proxies: 2, Classes: 1, PreferCloseEvery: 2})
	return measureMesh(tb, size)
}

func measureMesh(tb testing.TB, size Size) budget {
	b := budget{size: size}
	base := fixtures.LiveHeap()
	stop := make(chan struct{})
	defer close(stop)
	g := rigs.NewGraphWith(tb, rigs.GraphOptions{Stop: stop, NoDebugger: true}, Generate(size).Objects()...)
	waitCLAs(tb, g, size)
	b.graphHeap = int64(fixtures.LiveHeap() - base)
	b.graph = memz.Measure(outputs.MemoryRoots(g.Graph, nil))

	s := serveGraph(tb, g)
	defer s.Close()
	srv, gs := s.Srv, s.GRPC
	before := fixtures.LiveHeap()
	fleet, err := Connect(s.Addr, size)
	if err != nil {
		tb.Fatal(err)
	}
	defer fleet.Close()
	if _, err := fleet.WaitAll(10 * time.Minute); err != nil {
		tb.Fatal(err)
	}
	b.proxyHeap = int64(settledHeap() - before)
	all := memz.Measure(append(outputs.MemoryRoots(g.Graph, srv, gs),
		memz.Root{Group: "clients", Name: "in-process ADS clients", Value: fleet}))
	for _, r := range all.Roots {
		if r.Group == "xds" {
			b.server += r.Bytes
		}
	}
	b.proxies = all
	for p := 0; p < size.Proxies; p++ {
		b.subs += len(size.Subscriptions(p))
	}
	runtime.KeepAlive(g.In)
	return b
}

// plainServices is how many of the size's services have a CLA without proxies (no PreferClose).
func plainServices(size Size) int {
	plain := size.Services
	if size.PreferCloseEvery > 0 {
		plain -= (size.Services + size.PreferCloseEvery - 1) / size.PreferCloseEvery
	}
	return plain
}

// waitCLAs waits until the graph holds every service's endpoints and every plain service's CLA.
func waitCLAs(tb testing.TB, g *rigs.Graph, size Size) {
	awaitCLAs(tb, g, plainServices(size), size.Services)
}

// awaitCLAs waits until the graph holds clas CLA sets and services services' endpoints, woken by
// those two collections only, and closed after: nothing of the wait runs in what is measured next.
func awaitCLAs(tb testing.TB, g *rigs.Graph, clas, services int) {
	tb.Helper()
	w := fixtures.WakeOn(tb, fixtures.NewWaker(), g.CLAs)
	fixtures.WakeOn(tb, w, g.ServiceEndpoints)
	defer w.Close()
	w.Await(tb, 5*time.Minute, "the graph's CLAs", func() (bool, string) {
		c, s := len(g.CLAs.List()), len(g.ServiceEndpoints.List())
		return c >= clas && s >= services, fmt.Sprintf("%d of %d CLA sets, %d of %d services' endpoints", c, clas, s, services)
	})
}

// tableRow renders one root: its bytes, the same per unit, and its largest parts.
func tableRow(s *strings.Builder, r memz.Usage, per float64, parts int) {
	fmt.Fprintf(s, "%-40s %12d %10.0f", r.Name, r.Bytes, float64(r.Bytes)/per)
	for i, p := range r.Parts {
		if i == parts {
			break
		}
		fmt.Fprintf(s, "  %s=%.0f", p.Field, float64(p.Bytes)/per)
	}
	s.WriteString("\n")
}

// krtBookkeeping is what krt keeps besides the values of the collections: the dependencies of
// each output, the input → output mappings, indexes, handlers and queues.
func krtBookkeeping(roots []memz.Usage) int64 {
	var n int64
	for _, r := range roots {
		for _, p := range r.Parts {
			if strings.HasPrefix(p.Field, "collectionState.") || strings.HasPrefix(p.Field, "dependencyState.") ||
				strings.HasPrefix(p.Field, "staticList.") || p.Field == "indexes" || strings.HasPrefix(p.Field, "eventHandlers.") {
				if p.Field != "collectionState.outputs" && p.Field != "staticList.vals" {
					n += p.Bytes
				}
			}
		}
	}
	return n
}

// table renders the attribution, in bytes per endpoint.
func (b budget) table() string {
	var s strings.Builder
	eps := float64(b.size.Endpoints())
	fmt.Fprintf(&s, "%-40s %12s %10s\n", "collection", "bytes", "B/endpoint")
	for _, r := range b.graph.Roots {
		if r.Bytes == 0 {
			continue
		}
		tableRow(&s, r, eps, 4)
	}
	fmt.Fprintf(&s, "%-40s %12d %10.0f\n", "accounted", b.graph.Total, float64(b.graph.Total)/eps)
	book := krtBookkeeping(b.graph.Roots)
	fmt.Fprintf(&s, "%-40s %12d %10.0f\n", "  of which krt's bookkeeping", book, float64(book)/eps)
	fmt.Fprintf(&s, "%-40s %12d %10.0f\n", "measured heap", b.graphHeap, float64(b.graphHeap)/eps)
	s.WriteString("largest types:\n")
	for i, t := range b.graph.Types {
		if i == 12 {
			break
		}
		fmt.Fprintf(&s, "  %-70s %10.0f B/endpoint\n", t.Type, float64(t.Bytes)/eps)
	}
	if b.proxies.Roots == nil {
		return s.String()
	}
	proxies := float64(b.size.Proxies)
	fmt.Fprintf(&s, "%-40s %12s %10s\n", "server and clients", "bytes", "B/proxy")
	for _, r := range b.proxies.Roots {
		if r.Group != "xds" && r.Group != "clients" {
			continue
		}
		tableRow(&s, r, proxies, 6)
	}
	return s.String()
}

// TestBudgetAddsUp holds the memory accounting to the heap: at the small size, what the budget
// attributes to the collections adds up to the heap the inputs and the graph hold within 10%, and
// what it attributes to the server and clients to the heap the proxies add.
func TestBudgetAddsUp(t *testing.T) {
	b := measureBudget(t, Sizes["small"])
	t.Log("\n" + b.table())
	within := func(what string, accounted, heap int64) {
		d := math.Abs(float64(accounted)-float64(heap)) / float64(heap)
		t.Logf("%s: accounted %d B, heap %d B (%.1f%% apart)", what, accounted, heap, 100*d)
		if d > 0.10 {
			t.Errorf("%s: the budget accounts for %d bytes where the heap holds %d (%.1f%% apart, more than 10%%)", what, accounted, heap, 100*d)
		}
	}
	for _, r := range b.proxies.Roots {
		if r.Group == "xds" || r.Group == "clients" {
			t.Logf("%s: %d B %+v", r.Name, r.Bytes, r.Parts)
		}
	}
	within("inputs and graph", b.graph.Total, b.graphHeap)
	within("proxies (server and clients)", b.proxies.Total-b.graph.Total, b.proxyHeap)
}

// BenchmarkBudget reports the memory budget at the current size: heap per endpoint of the inputs
// and the graph, per collection, and per proxy and subscription of the server.
func BenchmarkBudget(bm *testing.B) {
	size := CurrentSize()
	for i := 0; i < bm.N; i++ {
		b := measureBudget(bm, size)
		eps := float64(size.Endpoints())
		if os.Getenv("KRTEDS_BUDGET_TABLE") != "" {
			fmt.Fprintln(os.Stderr, b.table())
		}
		bm.ReportMetric(float64(b.graphHeap)/eps, "heap-B/endpoint")
		bm.ReportMetric(float64(b.graph.Total)/eps, "accounted-B/endpoint")
		var inputs int64
		for _, r := range b.graph.Roots {
			if r.Group == graphs.KindInput {
				inputs += r.Bytes
			}
		}
		bm.ReportMetric(float64(inputs)/eps, "inputs-B/endpoint")
		bm.ReportMetric(float64(b.server)/float64(size.Proxies), "server-B/proxy")
		bm.ReportMetric(float64(b.server)/float64(b.subs), "server-B/subscription")
		bm.ReportMetric(float64(b.proxyHeap)/float64(size.Proxies), "heap-B/proxy(incl-client)")
	}
}
