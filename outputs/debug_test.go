package outputs

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestDebugNeedsLoopbackAtBothEnds: a sidecar forwards mesh traffic to the pod's address from
// 127.0.0.6; such a request is not a local one, though its peer is a loopback address.
func TestDebugNeedsLoopbackAtBothEnds(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})
	h := loopbackOnly(ok, false, nil)
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
