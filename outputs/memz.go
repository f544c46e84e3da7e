package outputs

import (
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs/memz"
	"github.com/krteds/krteds/outputs/source"
	"github.com/krteds/krteds/outputs/xds"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

// MemoryRoots lists what /debug/memz attributes the heap to, in dataflow order: each collection of
// the graph (inputs first), the graph's own wiring and the process-wide tables of shared label
// sets and endpoint metadata, then the xDS server and its gRPC servers
// (those given).
func MemoryRoots(g *graphs.Graph, srv *xds.Server, grpcServers ...any) []memz.Root {
	var roots []memz.Root
	for _, c := range g.Description.Collections() {
		roots = append(roots, memz.Root{Group: c.Kind, Name: c.Name, Value: c.Collection})
	}
	roots = append(roots, memz.Root{Group: "graph", Name: "graph wiring", Value: g})
	roots = append(roots, memz.Root{Group: "graph", Name: "shared metadata tables", Value: collections.SharedTables()})
	if srv != nil {
		roots = append(roots, memz.Root{Group: "xds", Name: "xDS server", Value: srv})
	}
	for _, s := range grpcServers {
		roots = append(roots, memz.Root{Group: "xds", Name: "gRPC server", Value: s})
	}
	return roots
}

// MemoryReport is /debug/memz: the heap attributed to each collection and to the xDS server, and
// the same in bytes per endpoint (inputs and graph) and per proxy and subscription (server).
type MemoryReport struct {
	memz.Report
	Endpoints     int `json:"endpoints"`
	Proxies       int `json:"proxies"`
	Subscriptions int `json:"subscriptions"`
	// GraphBytes is what the inputs and the graph hold; ServerBytes what the xDS and gRPC servers
	// hold.
	GraphBytes      int64   `json:"graphBytes"`
	ServerBytes     int64   `json:"serverBytes"`
	PerEndpoint     float64 `json:"bytesPerEndpoint"`
	PerProxy        float64 `json:"bytesPerProxy"`
	PerSubscription float64 `json:"bytesPerSubscription"`
	// HeapAlloc is the process's live heap (as of the last GC cycle) for comparison: the
	// accounted total leaves out process-wide state (protobuf metadata, loggers, the API client).
	HeapAlloc uint64 `json:"heapAlloc"`
	// Memos are the bounded caches of the graph and of its source: what each holds against its
	// bound.
	Memos []collections.MemoStats `json:"memos"`
	Took  string                  `json:"took"`
}

// MemoryPage serves /debug/memz. A walk visits every object once (O(objects), seconds on a large
// mesh, with no lock held for long); one runs at a time, others are told to retry.
func MemoryPage(s *source.Source, srv *xds.Server, grpcServers ...any) http.Handler {
	var running sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !running.TryLock() {
			w.Header().Set("Retry-After", "5")
			http.Error(w, "a memory walk is already running; retry shortly", http.StatusTooManyRequests)
			return
		}
		defer running.Unlock()
		WriteJSON(w, r, Memory(s, srv, grpcServers...))
	})
}

// Memory measures the graph s serves and the server.
func Memory(s *source.Source, srv *xds.Server, grpcServers ...any) MemoryReport {
	t0 := time.Now()
	g := s.Graph()
	rep := MemoryReport{Report: memz.Measure(MemoryRoots(g, srv, grpcServers...)), Memos: s.Memos()}
	rep.Took = time.Since(t0).Round(time.Millisecond).String()
	for _, r := range rep.Roots {
		if r.Group == "xds" {
			rep.ServerBytes += r.Bytes
		} else {
			rep.GraphBytes += r.Bytes
		}
	}
	for _, s := range g.ServiceEndpoints.List() {
		rep.Endpoints += len(s.Endpoints)
	}
	if srv != nil {
		for _, c := range srv.Debug().Statuses(xdsdebug.Everything, false) {
			rep.Proxies++
			for _, t := range c.Types {
				rep.Subscriptions += t.Subscribed
			}
		}
	}
	if rep.Endpoints > 0 {
		rep.PerEndpoint = float64(rep.GraphBytes) / float64(rep.Endpoints)
	}
	if rep.Proxies > 0 {
		rep.PerProxy = float64(rep.ServerBytes) / float64(rep.Proxies)
	}
	if rep.Subscriptions > 0 {
		rep.PerSubscription = float64(rep.ServerBytes) / float64(rep.Subscriptions)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rep.HeapAlloc = ms.HeapAlloc
	if len(rep.Types) > 40 {
		rep.Types = rep.Types[:40]
	}
	return rep
}
