package outputs

import (
	"encoding/json"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs/xds/admission"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

// DebugOptions configures the debug HTTP surface.
type DebugOptions struct {
	Graph     *graphs.Graph
	Debugger  *krt.DebugHandler
	Gatherer  prometheus.Gatherer
	ClusterID string
	// AllowRemote serves /debug/* to non-loopback clients too.
	AllowRemote bool
	// Ready reports whether krteds may serve (graph synced).
	Ready func() bool
	// ReadyNotes (optional) adds lines to /ready's body, such as input files not applied.
	ReadyNotes func() []string
	// Authenticate, when set, lets a non-loopback client in with the same authentication as the
	// secure xDS port (a service-account bearer token); Scope says what its identity may read.
	Authenticate func(*http.Request) (admission.Identity, error)
	Scope        func(admission.Identity) xdsdebug.Scope
	// Extra adds more pages (path → page) under the same loopback rule.
	Extra map[string]DebugPage
}

// DebugPage is one extra debug handler with its help line.
type DebugPage struct {
	Help    string
	Handler http.Handler
}

type debugPage struct {
	path, help string
}

// NewDebugMux builds the HTTP handler of the debug port: /ready, /metrics, and /debug/*. It
// returns the pages themselves (for the xDS debug type istio.io/debug, which decides access
// itself) and the handler the port serves, which answers /debug only over loopback or to an
// authenticated client.
func NewDebugMux(o DebugOptions) (*http.ServeMux, http.Handler) {
	mux := http.NewServeMux()
	var pages []debugPage
	handle := func(path, help string, h http.Handler) {
		pages = append(pages, debugPage{path, help})
		mux.Handle(path, h)
	}
	// Liveness: the process answers. Readiness (/ready) also needs the graph synced; a liveness
	// probe on it would restart a krteds that is still syncing a large cluster.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		if o.Ready != nil && !o.Ready() {
			http.Error(w, "not ready: the graph has not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
		if o.ReadyNotes != nil {
			for _, n := range o.ReadyNotes() {
				fmt.Fprintln(w, n)
			}
		}
	})
	if o.Gatherer != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) { WriteJSON(w, r, Build()) })
	handle("/debug/krt", "the collection graph: ?format=json|dot|html", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeGraph(w, r, o.Graph.Description.Snapshot())
	}))
	mux.HandleFunc("/debug/krt/dagre.min.js", serveDagre)
	handle("/debug/krt/licenses", "licences of the graph page's embedded layout library", http.HandlerFunc(serveLicenses))
	handle("/debug/krtz", "krt's own dump of every collection; ?collection=NAME filters", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		krtz(w, r, o.Debugger, o.Graph.Description.JoinDumps())
	}))
	handle("/debug/endpointShardz", "endpoint shards per service, istiod's shape", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, r, EndpointShardz(o.Graph.ServiceEndpoints.List()))
	}))
	handle("/debug/registryz", "services in the registry, istiod's shape", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, r, Registryz(o.Graph.ServiceInfos.List(), o.ClusterID))
	}))
	for _, path := range collections.SortedKeys(o.Extra) {
		handle(path, o.Extra[path].Help, o.Extra[path].Handler)
	}
	handle("/debug/pprof/", "Go profiles", http.HandlerFunc(pprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	index := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<!doctype html><title>krteds debug</title><h1>krteds debug</h1><ul>")
		for _, p := range pages {
			fmt.Fprintf(w, `<li><a href="%s">%s</a> %s</li>`, html.EscapeString(p.path), html.EscapeString(p.path), html.EscapeString(p.help))
		}
		fmt.Fprint(w, `<li><a href="/metrics">/metrics</a></li><li><a href="/ready">/ready</a></li><li><a href="/version">/version</a></li></ul>`)
	}
	mux.HandleFunc("/debug/list", func(w http.ResponseWriter, r *http.Request) {
		paths := []string{}
		for _, p := range pages {
			paths = append(paths, p.path)
		}
		WriteJSON(w, r, paths)
	})
	mux.HandleFunc("/debug", index)
	mux.HandleFunc("/debug/{$}", index)
	return mux, guard(mux, o)
}

// guard decides what a request of /debug may read. A request over loopback (both ends of its
// connection loopback addresses: a sidecar forwarding mesh traffic from 127.0.0.6 to the pod's
// address does not qualify; --debug-addr 127.0.0.1:15014 keeps the debug port off the pod's
// address altogether), or any with AllowRemote, reads everything. Another needs a valid
// service-account token, and reads what its identity's scope allows, as over xDS: the system
// namespace everything; another namespace only the per-proxy pages of NamespacePages for its
// own proxies (not pprof, not other namespaces' dumps).
func guard(next http.Handler, o DebugOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/debug") {
			next.ServeHTTP(w, r)
			return
		}
		scope := xdsdebug.Everything
		if !o.AllowRemote && !overLoopback(r) {
			if o.Authenticate == nil {
				http.Error(w, "debug endpoints answer only on loopback", http.StatusForbidden)
				return
			}
			id, err := o.Authenticate(r)
			if err != nil {
				http.Error(w, "debug endpoints answer non-loopback clients only with a valid service-account token: "+err.Error(), http.StatusUnauthorized)
				return
			}
			scope = xdsdebug.Scope{Namespace: id.Namespace}
			if o.Scope != nil {
				scope = o.Scope(id)
			}
			if page := strings.TrimPrefix(r.URL.Path, "/debug/"); !scope.All && !xdsdebug.NamespacePages[page] {
				http.Error(w, fmt.Sprintf("identity %s may read only %s, for the proxies of its namespace", id, namespacePageList()), http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(xdsdebug.WithCaller(r.Context(), xdsdebug.Caller{Scope: scope})))
	})
}

// namespacePageList names the pages an identity outside the system namespace may read.
func namespacePageList() string {
	var out []string
	for _, p := range collections.SortedKeys(xdsdebug.NamespacePages) {
		out = append(out, "/debug/"+p)
	}
	return strings.Join(out, " and ")
}

// overLoopback reports whether the request's connection has loopback addresses at both ends.
func overLoopback(r *http.Request) bool {
	if !IsLoopback(r.RemoteAddr) {
		return false
	}
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return ok && IsLoopback(local.String())
}

// IsLoopback reports whether a host:port (or bare host) is a loopback address.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// WriteJSON writes v as JSON, indented with ?pretty.
func WriteJSON(w http.ResponseWriter, r *http.Request, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	if _, pretty := r.URL.Query()["pretty"]; pretty {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

// krtz writes krt's debug dump and the graph's joins (which krt's dump leaves out), optionally
// only the collections named in ?collection=.
func krtz(w http.ResponseWriter, r *http.Request, d *krt.DebugHandler, joins []graphs.JoinDump) {
	raw, err := json.Marshal(d)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	var dump []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &dump); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	for _, j := range joins {
		name, err := json.Marshal(j.Name)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		state, err := json.Marshal(j.State)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		dump = append(dump, map[string]json.RawMessage{"name": name, "state": state})
	}
	if want := r.URL.Query()["collection"]; len(want) > 0 {
		keep := dump[:0]
		var names []string
		for _, c := range dump {
			var name string
			_ = json.Unmarshal(c["name"], &name)
			names = append(names, name)
			for _, n := range want {
				// krt names an index's collection "index/<name>"; /debug/krt calls it <name>.
				if n == name || "index/"+n == name {
					keep = append(keep, c)
				}
			}
		}
		if len(keep) == 0 {
			slices.Sort(names)
			http.Error(w, fmt.Sprintf("no collection named %q; the collections are: %s", want, strings.Join(names, ", ")), http.StatusNotFound)
			return
		}
		dump = keep
	}
	WriteJSON(w, r, dump)
}

// writeGraph renders the graph snapshot.
func writeGraph(w http.ResponseWriter, r *http.Request, s graphs.Snapshot) {
	switch r.URL.Query().Get("format") {
	case "dot":
		w.Header().Set("Content-Type", "text/vnd.graphviz")
		fmt.Fprint(w, Dot(s))
	case "html":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, Page)
	default:
		WriteJSON(w, r, s)
	}
}
