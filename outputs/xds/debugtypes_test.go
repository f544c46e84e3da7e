package xds

import (
	"net/http"
	"testing"
)

// TestDebugCallerScope is istiod's StatusGen/DebugGen rule: loopback and the system namespace's
// identities see everything; another identity only its namespace, and of istio.io/debug only
// the per-proxy pages for its own proxies; an unauthenticated remote client nothing.
func TestDebugCallerScope(t *testing.T) {
	s := &Server{systemNamespace: "istio-system", conns: map[string]*conn{}, names: newNameTable()}
	s.debugPages = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("page " + r.URL.String())) })
	for _, tc := range []struct {
		name       string
		c          *conn
		scope      Scope
		ok         bool
		page, want string // an istio.io/debug request and the body expected ("" for none)
	}{
		{"loopback", &conn{loopback: true}, Everything, true, "connections", "page /debug/connections"},
		{"system namespace", &conn{identity: &Identity{Namespace: "istio-system"}}, Everything, true, "push_status", "page /debug/push_status"},
		{"other namespace", &conn{identity: &Identity{Namespace: "ns1"}}, Scope{Namespace: "ns1"}, true, "connections", ""},
		// As istiod's errorHandler: a 404, the same as for no proxy at all.
		{"other namespace, a proxy not its own", &conn{identity: &Identity{Namespace: "ns1"}}, Scope{Namespace: "ns1"}, true, "edsz?proxyID=sidecar~1.2.3.4~a.ns2~ns2.svc.cluster.local",
			"404 Not Found: " + (&ProxyLookupError{ID: "sidecar~1.2.3.4~a.ns2~ns2.svc.cluster.local"}).Error() + "\n"},
		{"unauthenticated remote", &conn{}, Scope{}, false, "connections", ""},
		{"an identity over loopback: the identity decides", &conn{loopback: true, identity: &Identity{Namespace: "ns1"}}, Scope{Namespace: "ns1"}, true, "connections", ""},
	} {
		scope, ok := s.callerScope(tc.c)
		if scope != tc.scope || ok != tc.ok {
			t.Errorf("%s: scope %v %t, want %v %t", tc.name, scope, ok, tc.scope, tc.ok)
		}
		got := ""
		if res := s.debugResources(tc.c, debugRequest{typeURL: TypeDebug, name: tc.page}); len(res) == 1 {
			got = string(res[0].Resource.Value)
		}
		if got != tc.want {
			t.Errorf("%s: istio.io/debug %s gave %q, want %q", tc.name, tc.page, got, tc.want)
		}
	}
}

// TestDebugPageNamesCannotCrash: istio.io/debug resource names come from clients; none may
// panic the server.
func TestDebugPageNamesCannotCrash(t *testing.T) {
	s := &Server{systemNamespace: "istio-system", conns: map[string]*conn{}, names: newNameTable()}
	s.debugPages = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(r.URL.Path)) })
	for _, name := range []string{"a b", "\x00", "%zz", "connections\r\nHost: x", "/", "?", "#", "edsz?proxyID=%", string(make([]byte, 5000)), "..", "../../etc"} {
		_ = s.debugResources(&conn{loopback: true}, debugRequest{typeURL: TypeDebug, name: name})
		_ = s.debugResources(&conn{identity: &Identity{Namespace: "ns1"}}, debugRequest{typeURL: TypeDebug, name: name})
		_ = s.debugResources(&conn{loopback: true}, debugRequest{typeURL: TypeDebugConfigDump, name: name})
	}
}
