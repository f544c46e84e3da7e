package xdsdebug

import (
	"net/http"
	"testing"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/admission"
)

// noStreams is a server without streams.
type noStreams struct{}

func (noStreams) Proxies() []Proxy                       { return nil }
func (noStreams) Holders(string, string) []Holding       { return nil }
func (noStreams) Status(string, bool) (ConnStatus, bool) { return ConnStatus{}, false }
func (noStreams) Resolve(*collections.View, string, string) (*collections.Resource, bool) {
	return nil, false
}
func (noStreams) List(*collections.View, string) []*collections.Resource { return nil }

// TestDebugCallerScope is istiod's StatusGen/DebugGen rule: loopback and the system namespace's
// identities see everything; another identity only its namespace, and of istio.io/debug only
// the per-proxy pages for its own proxies; an unauthenticated remote client nothing.
func TestDebugCallerScope(t *testing.T) {
	d := New(noStreams{}, Options{SystemNamespace: "istio-system",
		Pages: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("page " + r.URL.String())) })})
	type caller struct {
		idn      *admission.Identity
		loopback bool
	}
	for _, tc := range []struct {
		name       string
		c          caller
		scope      Scope
		ok         bool
		page, want string // an istio.io/debug request and the body expected ("" for none)
	}{
		{"loopback", caller{loopback: true}, Everything, true, "connections", "page /debug/connections"},
		{"system namespace", caller{idn: &admission.Identity{Namespace: "istio-system"}}, Everything, true, "push_status", "page /debug/push_status"},
		{"other namespace", caller{idn: &admission.Identity{Namespace: "ns1"}}, Scope{Namespace: "ns1"}, true, "connections", ""},
		// As istiod's errorHandler: a 404, the same as for no proxy at all.
		{"other namespace, a proxy not its own", caller{idn: &admission.Identity{Namespace: "ns1"}}, Scope{Namespace: "ns1"}, true, "edsz?proxyID=sidecar~1.2.3.4~a.ns2~ns2.svc.cluster.local",
			"404 Not Found: " + (&ProxyLookupError{ID: "sidecar~1.2.3.4~a.ns2~ns2.svc.cluster.local"}).Error() + "\n"},
		{"unauthenticated remote", caller{}, Scope{}, false, "connections", ""},
		{"an identity over loopback: the identity decides", caller{loopback: true, idn: &admission.Identity{Namespace: "ns1"}}, Scope{Namespace: "ns1"}, true, "connections", ""},
	} {
		scope, ok := d.CallerScope(tc.c.idn, tc.c.loopback)
		if scope != tc.scope || ok != tc.ok {
			t.Errorf("%s: scope %v %t, want %v %t", tc.name, scope, ok, tc.scope, tc.ok)
		}
		got := ""
		if ok {
			if res, _ := d.Answer(scope, "", TypeDebug, tc.page); len(res) == 1 {
				got = string(res[0].Resource.Value)
			}
		}
		if got != tc.want {
			t.Errorf("%s: istio.io/debug %s gave %q, want %q", tc.name, tc.page, got, tc.want)
		}
	}
}

// TestDebugPageNamesCannotCrash: istio.io/debug resource names come from clients; none may
// panic the server.
func TestDebugPageNamesCannotCrash(t *testing.T) {
	d := New(noStreams{}, Options{SystemNamespace: "istio-system",
		Pages: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(r.URL.Path)) })})
	for _, name := range []string{"a b", "\x00", "%zz", "connections\r\nHost: x", "/", "?", "#", "edsz?proxyID=%", string(make([]byte, 5000)), "..", "../../etc"} {
		_, _ = d.Answer(Everything, "", TypeDebug, name)
		_, _ = d.Answer(Scope{Namespace: "ns1"}, "", TypeDebug, name)
		_, _ = d.Answer(Everything, "", TypeDebugConfigDump, name)
	}
}
