package xdsdebug

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	status "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/admission"
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

// IsDebugType reports whether a type URL is one of istiod's debug types.
func IsDebugType(u string) bool { return u == TypeDebug || strings.HasPrefix(u, TypeDebug+"/") }

// CallerScope is who may see what on a stream, as istiod's StatusGen decides: an authenticated
// identity of the system namespace sees every proxy, another the proxies of its namespace
// (wherever it connects from: the identity decides); an unauthenticated loopback client (a
// port-forwarded istioctl on the plaintext port) every proxy; an unauthenticated remote client
// nothing (ok false).
func (d *Debug) CallerScope(idn *admission.Identity, loopback bool) (Scope, bool) {
	switch {
	case idn != nil:
		return d.ScopeOf(*idn), true
	case loopback:
		return Everything, true
	}
	return Scope{}, false
}

// Answer is the answer to a request of a debug type on the stream self, by a caller of scope:
// its resources (none for a type it does not know), and for syncz the control plane.
func (d *Debug) Answer(scope Scope, self, typeURL, name string) ([]*discovery.Resource, *core.ControlPlane) {
	switch typeURL {
	case TypeDebugSyncz:
		return d.syncz(self, scope), d.controlPlane
	case TypeDebugConfigDump:
		return d.configDump(name, scope), nil
	case TypeDebug:
		return d.debugPage(name, scope), nil
	}
	return nil, nil
}

func (d *Debug) syncz(self string, scope Scope) []*discovery.Resource {
	var out []*discovery.Resource
	for _, st := range d.Statuses(scope, false) {
		if st.ConnID == self {
			continue
		}
		meta := map[string]*structpb.Value{
			"CLUSTER_ID": structpb.NewStringValue(orDefault(st.Proxy.ClusterID, d.clusterID)),
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
func (d *Debug) configDump(proxyID string, scope Scope) []*discovery.Resource {
	st, err := d.FindProxy(proxyID, scope)
	if err != nil {
		return nil
	}
	resolved := func(typeURL string, add func(name, version string, a *anypb.Any, at *timestamppb.Timestamp)) {
		ts := st.Types[typeURL]
		var at *timestamppb.Timestamp
		if !ts.SentTime.IsZero() {
			at = timestamppb.New(ts.SentTime)
		}
		for _, r := range d.Watched(st, typeURL) {
			add(r.Name, ts.SentVersion, &anypb.Any{TypeUrl: r.TypeURL, Value: r.Body}, at)
		}
	}
	clusters := &admin.ClustersConfigDump{}
	resolved(resourcev3.ClusterType, func(_, v string, a *anypb.Any, at *timestamppb.Timestamp) {
		clusters.DynamicActiveClusters = append(clusters.DynamicActiveClusters, &admin.ClustersConfigDump_DynamicCluster{VersionInfo: v, Cluster: a, LastUpdated: at})
	})
	listeners := &admin.ListenersConfigDump{}
	resolved(resourcev3.ListenerType, func(name, v string, a *anypb.Any, at *timestamppb.Timestamp) {
		listeners.DynamicListeners = append(listeners.DynamicListeners, &admin.ListenersConfigDump_DynamicListener{Name: name,
			ActiveState: &admin.ListenersConfigDump_DynamicListenerState{VersionInfo: v, Listener: a, LastUpdated: at}})
	})
	routes := &admin.RoutesConfigDump{}
	resolved(resourcev3.RouteType, func(_, v string, a *anypb.Any, at *timestamppb.Timestamp) {
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
func (d *Debug) Watched(st ConnStatus, typeURL string) []*collections.Resource {
	if st.View == nil {
		return nil
	}
	var out []*collections.Resource
	seen := map[string]bool{}
	for _, name := range st.Watches[typeURL] {
		if name == "*" {
			for _, r := range d.streams.List(st.View, typeURL) {
				if !seen[r.Name] {
					seen[r.Name] = true
					out = append(out, r)
				}
			}
			continue
		}
		if r, _ := d.streams.Resolve(st.View, typeURL, name); r != nil && !seen[r.Name] {
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
func (d *Debug) debugPage(name string, scope Scope) []*discovery.Resource {
	if d.pages == nil || name == "" {
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
			st, err := d.FindProxy(id, scope)
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
	d.pages.ServeHTTP(rec, req)
	body := rec.Body.Bytes()
	if rec.Code != http.StatusOK {
		body = append([]byte(fmt.Sprintf("%d %s: ", rec.Code, http.StatusText(rec.Code))), body...)
	}
	return []*discovery.Resource{{Name: name, Resource: &anypb.Any{TypeUrl: TypeDebug, Value: body}}}
}

// syncStatus is istiod's debugSyncStatus, and STALE for a client behind for longer than the
// stale threshold though it acknowledged what it was sent (its next response is not sent yet).
func syncStatus(t TypeStatus) status.ConfigStatus {
	switch {
	case t.LastError != "":
		return status.ConfigStatus_ERROR
	case t.SentNonce == "":
		return status.ConfigStatus_NOT_SENT
	case t.Behind != nil && t.Behind.Stale:
		return status.ConfigStatus_STALE
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
