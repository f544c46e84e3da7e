package outputs

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/krteds/krteds/outputs/xds/admission"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

// TestDebugNeedsLoopbackAtBothEnds: a sidecar forwards mesh traffic to the pod's address from
// 127.0.0.6; such a request is not a local one, though its peer is a loopback address.
func TestDebugNeedsLoopbackAtBothEnds(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})
	h := guard(ok, DebugOptions{})
	for _, tc := range []struct {
		remote, local string
		want          int
	}{
		{"127.0.0.1:40000", "127.0.0.1:15014", 200},
		{"[::1]:40000", "[::1]:15014", 200},
		{"127.0.0.6:40000", "10.1.2.3:15014", 403}, // through a sidecar
		{"10.9.9.9:40000", "10.1.2.3:15014", 403},
	} {
		r := httptest.NewRequest("GET", "/debug/krt", nil)
		r.RemoteAddr = tc.remote
		local, err := net.ResolveTCPAddr("tcp", tc.local)
		if err != nil {
			t.Fatal(err)
		}
		r = r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, local))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s → %s: %d, want %d", tc.remote, tc.local, w.Code, tc.want)
		}
	}
}

// TestDebugScopeByIdentity: a remote caller with a token reads what its identity's scope
// allows, as over xDS: the system namespace everything (pprof too); another namespace only the
// per-proxy pages, the request carrying its scope to the page (which finds only that
// namespace's proxies); a bad token nothing.
func TestDebugScopeByIdentity(t *testing.T) {
	var got xdsdebug.Caller
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, ok := xdsdebug.CallerFrom(r.Context())
		if !ok && strings.HasPrefix(r.URL.Path, "/debug") {
			http.Error(w, "no caller", http.StatusInternalServerError)
			return
		}
		got = c
	})
	h := guard(next, DebugOptions{
		Authenticate: func(r *http.Request) (admission.Identity, error) {
			ns, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ns:")
			if !ok {
				return admission.Identity{}, errors.New("no valid token")
			}
			return admission.Identity{TrustDomain: "cluster.local", Namespace: ns, ServiceAccount: "sa"}, nil
		},
		Scope: func(id admission.Identity) xdsdebug.Scope {
			if id.Namespace == "istio-system" {
				return xdsdebug.Everything
			}
			return xdsdebug.Scope{Namespace: id.Namespace}
		},
	})
	for _, tc := range []struct {
		token, path string
		want        int
		scope       xdsdebug.Scope
	}{
		{"ns:istio-system", "/debug/pprof/", 200, xdsdebug.Everything},
		{"ns:istio-system", "/debug/krtz", 200, xdsdebug.Everything},
		{"ns:istio-system", "/debug/edsz?proxyID=x", 200, xdsdebug.Everything},
		{"ns:ns1", "/debug/pprof/", 403, xdsdebug.Scope{}},
		{"ns:ns1", "/debug/pprof/heap", 403, xdsdebug.Scope{}},
		{"ns:ns1", "/debug/krtz", 403, xdsdebug.Scope{}},
		{"ns:ns1", "/debug/syncz", 403, xdsdebug.Scope{}},
		{"ns:ns1", "/debug/adsz", 403, xdsdebug.Scope{}},
		{"ns:ns1", "/debug/explain?proxyID=x&cluster=y", 403, xdsdebug.Scope{}},
		{"ns:ns1", "/debug/edsz?proxyID=x", 200, xdsdebug.Scope{Namespace: "ns1"}},
		{"ns:ns1", "/debug/config_dump?proxyID=x", 200, xdsdebug.Scope{Namespace: "ns1"}},
		{"bogus", "/debug/edsz?proxyID=x", 401, xdsdebug.Scope{}},
		{"", "/ready", 200, xdsdebug.Scope{}},
	} {
		got = xdsdebug.Caller{}
		r := httptest.NewRequest("GET", tc.path, nil)
		r.RemoteAddr = "10.9.9.9:40000"
		if tc.token != "" {
			r.Header.Set("Authorization", "Bearer "+tc.token)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s as %q: %d (%s), want %d", tc.path, tc.token, w.Code, strings.TrimSpace(w.Body.String()), tc.want)
		}
		if w.Code == 200 && got.Scope != tc.scope {
			t.Errorf("%s as %q: the page was handed scope %v, want %v", tc.path, tc.token, got.Scope, tc.scope)
		}
	}
}

// TestGraphPageLoadsOnlyFromThisServer: the embedded layout library is the pinned file, and the
// page fetches nothing from another origin.
func TestGraphPageLoadsOnlyFromThisServer(t *testing.T) {
	if got := dagreDigest(); got != DagreSHA256 {
		t.Errorf("embedded dagre.min.js has sha256 %s, pinned %s (web/fetch-dagre.sh checks it against npm)", got, DagreSHA256)
	}
	// Only the SVG namespace may name another origin; it is an identifier, never loaded.
	if m := regexp.MustCompile(`(src|href|fetch\(|url\(|@import)\s*=?\s*["']?(https?:)?//`).FindString(Page); m != "" {
		t.Errorf("the graph page loads from another origin (%q): it must load only from krteds", m)
	}
	if !strings.Contains(Page, `<script src="krt/dagre.min.js">`) {
		t.Error("the graph page does not load the embedded layout library")
	}
	w := httptest.NewRecorder()
	serveLicenses(w, httptest.NewRequest("GET", "/debug/krt/licenses", nil))
	if body := w.Body.String(); strings.Count(body, "Permission is hereby granted") != 2 {
		t.Errorf("/debug/krt/licenses should carry both MIT licences:\n%s", body)
	}
}
