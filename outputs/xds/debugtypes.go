package xds

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	status "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/krteds/krteds/collections"
)

// The xDS debug types istiod answers, which istioctl asks for with --xds-address:
//   - istio.io/debug/syncz: one envoy.service.status.v3.ClientConfig per connected proxy, its
//     sync state per type (istioctl proxy-status);
//   - istio.io/debug/config_dump: the Envoy admin config dump of the proxy the one resource name
//     names (istioctl proxy-status <proxy> --file, to diff it against the proxy's own);
//   - istio.io/debug: the debug page the one resource name names, e.g. "connections" or
//     "edsz?proxyID=…", its body as the resource (istioctl x internal-debug).
const (
	TypeDebugSyncz      = "istio.io/debug/syncz"
	TypeDebugConfigDump = "istio.io/debug/config_dump"
	TypeDebug           = "istio.io/debug"
)

// isDebugType reports whether a type URL is one of istiod's debug types.
func isDebugType(u string) bool { return u == TypeDebug || strings.HasPrefix(u, TypeDebug+"/") }

// debugRequest is a request of a type krteds serves no resources of: answered once, with the
// debug resources when the type is a debug type.
type debugRequest struct {
	typeURL string
	name    string // the first resource name, clipped
}

// debugNoncePrefix starts the nonce of every answer to a debug type.
const debugNoncePrefix = "debug-"

// nextDebugNonce is the nonce of the next answer to a debug type on stream c.
func (c *conn) nextDebugNonce() string {
	return debugNoncePrefix + strconv.FormatUint(c.debugSent.Add(1), 10)
}

// acksDebugAnswer reports whether a nonce is one of a debug answer sent on stream c: the
// request is then an ACK. A debug request with any other nonce is a new request (istioctl's
// client sends a nonce of its own with its first request; istiod answers it).
func (c *conn) acksDebugAnswer(nonce string) bool {
	n, err := strconv.ParseUint(strings.TrimPrefix(nonce, debugNoncePrefix), 10, 64)
	return err == nil && strings.HasPrefix(nonce, debugNoncePrefix) && n >= 1 && n <= c.debugSent.Load()
}

// maxDebugName bounds the resource name of a debug request krteds keeps.
const maxDebugName = 1024

// callerScope is who may see what on stream c, as istiod's StatusGen decides: an authenticated
// identity of the system namespace sees every proxy, another the proxies of its namespace
// (wherever it connects from: the identity decides); an unauthenticated loopback client (a
// port-forwarded istioctl on the plaintext port) every proxy; an unauthenticated remote client
// nothing (ok false).
func (s *Server) callerScope(c *conn) (Scope, bool) {
	switch {
	case c.identity != nil:
		return s.ScopeOf(*c.identity), true
	case c.loopback:
		return Everything, true
	}
	return Scope{}, false
}

// debugResources answers a debug request on stream c.
func (s *Server) debugResources(c *conn, req debugRequest) []*discovery.Resource {
	scope, ok := s.callerScope(c)
	if !ok {
		return nil
	}
	switch req.typeURL {
	case TypeDebugSyncz:
		return s.syncz(c, scope)
	case TypeDebugConfigDump:
		return s.configDump(req.name, scope)
	case TypeDebug:
		return s.debugPage(req.name, scope)
	}
	return nil
}

func (s *Server) syncz(c *conn, scope Scope) []*discovery.Resource {
	var out []*discovery.Resource
	for _, st := range s.Status() {
		if st.Proxy == nil || st.ConnID == c.id || !scope.Sees(st.Proxy.Namespace) {
			continue
		}
		meta := map[string]*structpb.Value{
			"CLUSTER_ID": structpb.NewStringValue(orDefault(st.Proxy.ClusterID, s.clusterID)),
			"NAMESPACE":  structpb.NewStringValue(st.Proxy.Namespace),
		}
		if st.IstioVersion != "" {
			meta["ISTIO_VERSION"] = structpb.NewStringValue(st.IstioVersion) // istioctl's VERSION column
		}
		cc := &status.ClientConfig{Node: &core.Node{Id: istioProxyID(st.Proxy.ID), Metadata: &structpb.Struct{Fields: meta}}}
		urls := make([]string, 0, len(st.Types))
		for u := range st.Types {
			urls = append(urls, u)
		}
		slices.Sort(urls)
		for _, u := range urls {
			ts := st.Types[u]
			gc := &status.ClientConfig_GenericXdsConfig{TypeUrl: u, ConfigStatus: syncStatus(ts)}
			if !ts.SentTime.IsZero() {
				gc.LastUpdated = timestamppb.New(ts.SentTime)
			}
			cc.GenericXdsConfigs = append(cc.GenericXdsConfigs, gc)
		}
		a, err := anypb.New(cc)
		if err != nil {
			continue
		}
		out = append(out, &discovery.Resource{Name: istioProxyID(st.Proxy.ID), Resource: a})
	}
	return out
}

// istioProxyID is istiod's proxy ID of a node id: its third field, <pod>.<namespace>, for
// sidecar~<ip>~<pod>.<namespace>~<domain>; the node id itself when it has another shape.
func istioProxyID(nodeID string) string {
	if parts := strings.Split(nodeID, "~"); len(parts) == 4 && parts[2] != "" {
		return parts[2]
	}
	return nodeID
}

// configDump is istiod's connectionConfigDump without EDS: the clusters, listeners and routes a
// proxy watches, as the graph resolves them for its view now, each with the version last sent.
func (s *Server) configDump(proxyID string, scope Scope) []*discovery.Resource {
	st, err := s.FindProxy(proxyID, scope)
	if err != nil {
		return nil
	}
	resolved := func(typeURL string, add func(name, version string, a *anypb.Any, at *timestamppb.Timestamp)) {
		ts := st.Types[typeURL]
		var at *timestamppb.Timestamp
		if !ts.SentTime.IsZero() {
			at = timestamppb.New(ts.SentTime)
		}
		for _, r := range s.Watched(st, typeURL) {
			add(r.Name, ts.SentVersion, &anypb.Any{TypeUrl: r.TypeURL, Value: r.Body}, at)
		}
	}
	clusters := &admin.ClustersConfigDump{}
	resolved(tCluster.url(), func(_, v string, a *anypb.Any, at *timestamppb.Timestamp) {
		clusters.DynamicActiveClusters = append(clusters.DynamicActiveClusters, &admin.ClustersConfigDump_DynamicCluster{VersionInfo: v, Cluster: a, LastUpdated: at})
	})
	listeners := &admin.ListenersConfigDump{}
	resolved(tListener.url(), func(name, v string, a *anypb.Any, at *timestamppb.Timestamp) {
		listeners.DynamicListeners = append(listeners.DynamicListeners, &admin.ListenersConfigDump_DynamicListener{Name: name,
			ActiveState: &admin.ListenersConfigDump_DynamicListenerState{VersionInfo: v, Listener: a, LastUpdated: at}})
	})
	routes := &admin.RoutesConfigDump{}
	resolved(tRoute.url(), func(_, v string, a *anypb.Any, at *timestamppb.Timestamp) {
		routes.DynamicRouteConfigs = append(routes.DynamicRouteConfigs, &admin.RoutesConfigDump_DynamicRouteConfig{VersionInfo: v, RouteConfig: a, LastUpdated: at})
	})
	var out []*discovery.Resource
	for _, m := range []proto.Message{clusters, listeners, routes} {
		a, err := anypb.New(m)
		if err != nil {
			continue
		}
		out = append(out, &discovery.Resource{Resource: a})
	}
	return out
}

// Watched is what a stream watches of a type, as the graph resolves it for the stream's view
// now: the names it subscribes to, and everything its view lists when it subscribes to the
// wildcard.
func (s *Server) Watched(st ConnStatus, typeURL string) []*collections.Resource {
	if st.View == nil {
		return nil
	}
	var out []*collections.Resource
	seen := map[string]bool{}
	for _, name := range st.Watches[typeURL] {
		if name == "*" {
			for _, r := range s.src.List(st.View, typeURL) {
				if !seen[r.Name] {
					seen[r.Name] = true
					out = append(out, r)
				}
			}
			continue
		}
		if r, _ := s.src.Resolve(st.View, typeURL, name); r != nil && !seen[r.Name] {
			seen[r.Name] = true
			out = append(out, r)
		}
	}
	return out
}

// debugPage answers istio.io/debug: the body of the debug page /debug/<name>, as istiod's
// DebugGen does. Outside the system namespace only the pages of NamespacePages, for a proxy of
// the caller's namespace: the proxy is resolved here, under the caller's scope, and the page is
// handed that one connection; a proxyID that names none the caller sees is answered as the page
// answers it (404, the same for a proxy of another namespace as for no proxy at all).
func (s *Server) debugPage(name string, scope Scope) []*discovery.Resource {
	if s.debugPages == nil || name == "" {
		return nil
	}
	u, err := url.Parse(name)
	if err != nil || strings.Contains(u.Path, "..") {
		return nil
	}
	caller := Caller{Scope: scope}
	if !scope.All {
		if !NamespacePages[u.Path] {
			return nil
		}
		if id := u.Query().Get("proxyID"); id != "" {
			st, err := s.FindProxy(id, scope)
			if err != nil {
				code := ProxyLookupStatus(err)
				body := fmt.Sprintf("%d %s: %s\n", code, http.StatusText(code), err)
				return []*discovery.Resource{{Name: name, Resource: &anypb.Any{TypeUrl: TypeDebug, Value: []byte(body)}}}
			}
			caller.ConnID = st.ConnID
		}
	}
	// http.NewRequest, not httptest's, which panics on a name it cannot parse.
	req, err := http.NewRequestWithContext(WithCaller(context.Background(), caller), http.MethodGet, "/debug/"+strings.TrimPrefix(name, "/"), nil)
	if err != nil {
		return nil
	}
	rec := httptest.NewRecorder()
	s.debugPages.ServeHTTP(rec, req)
	body := rec.Body.Bytes()
	if rec.Code != http.StatusOK {
		body = append([]byte(fmt.Sprintf("%d %s: ", rec.Code, http.StatusText(rec.Code))), body...)
	}
	return []*discovery.Resource{{Name: name, Resource: &anypb.Any{TypeUrl: TypeDebug, Value: body}}}
}

// syncStatus is istiod's debugSyncStatus.
func syncStatus(t TypeStatus) status.ConfigStatus {
	switch {
	case t.LastError != "":
		return status.ConfigStatus_ERROR
	case t.SentNonce == "":
		return status.ConfigStatus_NOT_SENT
	case t.AckedNonce == t.SentNonce:
		return status.ConfigStatus_SYNCED
	}
	return status.ConfigStatus_STALE
}

func orDefault(v, d string) string {
	if v == "" {
		return d
	}
	return v
}

// loopbackEnds reports whether both ends of a connection are loopback addresses.
func loopbackEnds(remote, local net.Addr) bool {
	is := func(a net.Addr) bool {
		if a == nil {
			return false
		}
		host, _, err := net.SplitHostPort(a.String())
		if err != nil {
			host = a.String()
		}
		ip := net.ParseIP(strings.Trim(host, "[]"))
		return ip != nil && ip.IsLoopback()
	}
	return is(remote) && is(local)
}
