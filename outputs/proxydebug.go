package outputs

import (
	"encoding/json"
	"fmt"
	"net/http"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs/explain"
	"github.com/krteds/krteds/outputs/history"
	"github.com/krteds/krteds/outputs/source"
	"github.com/krteds/krteds/outputs/xds"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
	"github.com/krteds/krteds/transforms"
)

// ProxyPages are istiod's per-proxy and connection debug pages: /debug/edsz?proxyID=,
// /debug/config_dump?proxyID=, /debug/adsz[?proxyID=], /debug/connections, /debug/push_status,
// and krteds' /debug/explain?proxyID= (with &history=1, the timeline of the changes the history
// store recorded; nil: none) and /debug/staleness, of the graph s serves.
func ProxyPages(s *source.Source, srv *xds.Server, hist *history.Store) map[string]DebugPage {
	g := s.Graph()
	return map[string]DebugPage{
		"/debug/edsz": {Help: "the ClusterLoadAssignments a proxy is sent, as protojson; ?proxyID=<connection id, node id, pod.namespace or a part of it naming one proxy>",
			Handler: proxyHandler(srv, func(w http.ResponseWriter, r *http.Request, c xdsdebug.ConnStatus) {
				writeResources(w, srv, c, transforms.TypeCLA, func() proto.Message { return &endpoint.ClusterLoadAssignment{} })
			})},
		"/debug/config_dump": {Help: "what a proxy is sent, every type, as protojson; ?proxyID=",
			Handler: proxyHandler(srv, func(w http.ResponseWriter, r *http.Request, c xdsdebug.ConnStatus) {
				out := map[string]json.RawMessage{}
				for _, t := range []struct {
					url string
					mk  func() proto.Message
				}{
					{transforms.TypeCluster, func() proto.Message { return &cluster.Cluster{} }},
					{transforms.TypeCLA, func() proto.Message { return &endpoint.ClusterLoadAssignment{} }},
					{transforms.TypeListener, func() proto.Message { return &listener.Listener{} }},
					{transforms.TypeRoute, func() proto.Message { return &route.RouteConfiguration{} }},
				} {
					b, err := resourcesJSON(srv, c, t.url, t.mk)
					if err != nil {
						http.Error(w, err.Error(), http.StatusInternalServerError)
						return
					}
					out[t.url] = b
				}
				WriteJSON(w, r, out)
			})},
		"/debug/staleness": {Help: "proxies behind what krteds would send them, per type: since when, how many names, what they wait on; ?stale=1 for those past the stale threshold only",
			Handler: stalenessPage(srv)},
		"/debug/explain": {Help: "why each endpoint of a cluster is, or is not, sent to a proxy; ?proxyID=&cluster=[&endpoint=][&history=1: when each change happened and reached the proxies]",
			Handler: proxyHandler(srv, explainPage(s, srv, hist))},
		"/debug/adsz": {Help: "connected xDS clients, their class and what they watch; ?proxyID= for one", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("proxyID") == "" {
				WriteJSON(w, r, srv.Debug().Adsz())
				return
			}
			// As istiod's adsz: the one connection ?proxyID= names, 404 when it names none.
			proxyHandler(srv, func(w http.ResponseWriter, r *http.Request, c xdsdebug.ConnStatus) {
				WriteJSON(w, r, xdsdebug.AdszOf(c))
			}).ServeHTTP(w, r)
		})},
		"/debug/connections": {Help: "connected clients: connection id, address, connected since", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			type conn struct {
				ConnectionID string `json:"connectionId"`
				ConnectedAt  string `json:"connectedAt"`
				Address      string `json:"address"`
				Peer         string `json:"peer,omitempty"`
			}
			out := struct {
				Total   int    `json:"totalClients"`
				Clients []conn `json:"clients"`
			}{Clients: []conn{}}
			for _, c := range srv.Debug().Statuses(xdsdebug.Everything, false) {
				out.Clients = append(out.Clients, conn{c.ConnID, c.ConnectedAt.UTC().Format("2006-01-02T15:04:05.000Z"), c.Proxy.IP, c.Peer})
			}
			out.Total = len(out.Clients)
			WriteJSON(w, r, out)
		})},
		"/debug/push_status": {Help: "the registry's counts and the problems found, by kind and reason", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			problems := map[string]map[string]int{}
			for _, op := range g.Problems.List() {
				for _, p := range op.Problems {
					if problems[p.Kind] == nil {
						problems[p.Kind] = map[string]int{}
					}
					problems[p.Kind][p.Reason]++
				}
			}
			snap := g.Description.Snapshot()
			size := func(n string) int { ni, _ := snap.Node(n); return ni.Size }
			WriteJSON(w, r, map[string]any{
				"services": size(graphs.NameServiceInfos), "endpointShards": size(graphs.NameServiceEndpoints),
				"clusterLoadAssignments": size(graphs.NameCLAs), "clients": srv.Streams(), "problems": problems,
			})
		})},
	}
}

// stalenessPage is /debug/staleness: the proxies the caller may read that are behind.
func stalenessPage(srv *xds.Server) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, ok := xdsdebug.CallerFrom(r.Context())
		if !ok {
			http.Error(w, "no caller: the page is served only through the debug port or xDS", http.StatusForbidden)
			return
		}
		WriteJSON(w, r, srv.Debug().Staleness(caller.Scope, r.URL.Query().Get("stale") == "1"))
	})
}

// explainPage is /debug/explain for the proxy found: the explanation, and with &history=1 the
// timeline of the cluster's changes and where the proxies the caller may read stand.
func explainPage(s *source.Source, srv *xds.Server, hist *history.Store) func(http.ResponseWriter, *http.Request, xdsdebug.ConnStatus) {
	return func(w http.ResponseWriter, r *http.Request, c xdsdebug.ConnStatus) {
		cluster := r.URL.Query().Get("cluster")
		if cluster == "" {
			http.Error(w, "?cluster= (an EDS cluster name, outbound|<port>|<subset>|<hostname>) is required", http.StatusBadRequest)
			return
		}
		p := s.Graph().Proxies.GetKey(c.ConnID)
		if p == nil {
			http.Error(w, fmt.Sprintf("proxy %s is connected but its view is not computed yet; ask again", c.Proxy.ID), http.StatusServiceUnavailable)
			return
		}
		ex, err := explain.Explain(s, p, cluster, r.URL.Query().Get("endpoint"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if r.URL.Query().Get("history") != "1" {
			WriteJSON(w, r, ex)
			return
		}
		if hist == nil {
			http.Error(w, "the history is not recorded (krteds serve --history-per-service 0 turns it off)", http.StatusNotFound)
			return
		}
		caller, _ := xdsdebug.CallerFrom(r.Context())
		holders := srv.Debug().Holders(caller.Scope, transforms.TypeCLA, cluster)
		tl := hist.Timeline(ex.Service, cluster, r.URL.Query().Get("endpoint"), c.ConnID, holders)
		WriteJSON(w, r, ExplainedHistory{Explanation: ex, History: &tl})
	}
}

// ExplainedHistory is /debug/explain with &history=1: the explanation and the timeline.
type ExplainedHistory struct {
	explain.Explanation
	History *history.Timeline `json:"history,omitempty"`
}

// proxyHandler finds the connection ?proxyID= names (a connection id, a node id, istiod's
// <pod>.<namespace> or a part of it naming one proxy: xdsdebug.Debug.FindProxy) among those the
// caller may read; a request that came over xDS names the connection it was resolved to already.
func proxyHandler(srv *xds.Server, f func(http.ResponseWriter, *http.Request, xdsdebug.ConnStatus)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		caller, ok := xdsdebug.CallerFrom(r.Context())
		if !ok {
			http.Error(w, "no caller: the page is served only through the debug port or xDS", http.StatusForbidden)
			return
		}
		id := r.URL.Query().Get("proxyID")
		if caller.ConnID != "" {
			id = caller.ConnID
		}
		if id == "" {
			http.Error(w, "You must provide a proxyID in the query string: a connection id, a node id, or <pod>.<namespace>", http.StatusBadRequest)
			return
		}
		c, err := srv.Debug().FindProxy(id, caller.Scope)
		if err != nil {
			http.Error(w, err.Error(), xdsdebug.ProxyLookupStatus(err))
			return
		}
		f(w, r, c)
	})
}

func writeResources(w http.ResponseWriter, srv *xds.Server, c xdsdebug.ConnStatus, typeURL string, mk func() proto.Message) {
	b, err := resourcesJSON(srv, c, typeURL, mk)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// resourcesJSON renders, as a JSON array of protojson, the resources of a type the connection
// watches (the wildcard included), as the graph resolves them for its view now.
func resourcesJSON(srv *xds.Server, c xdsdebug.ConnStatus, typeURL string, mk func() proto.Message) (json.RawMessage, error) {
	out := []json.RawMessage{}
	for _, r := range srv.Debug().Watched(c, typeURL) {
		m := mk()
		if err := proto.Unmarshal(r.Body, m); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", r.Name, err)
		}
		b, err := protojson.Marshal(m)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return json.Marshal(out)
}
