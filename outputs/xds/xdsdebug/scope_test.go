package xdsdebug

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestProxyLookupError: what a page answers a proxyID that names no proxy, or several: the
// status, the id clipped when huge, at most ten candidates listed.
func TestProxyLookupError(t *testing.T) {
	many := make([]string, 12)
	for i := range many {
		many[i] = fmt.Sprintf("web-%02d.ns1", i)
	}
	for _, tc := range []struct {
		name     string
		err      error
		status   int
		contains []string
		lacks    []string
	}{
		{"none", &ProxyLookupError{ID: "nobody.ns1"}, http.StatusNotFound, []string{`no connected proxy "nobody.ns1"`, "another"}, nil},
		{"two", &ProxyLookupError{ID: "web", Matches: []string{"web.ns1", "web.ns2"}}, http.StatusConflict,
			[]string{`proxyID "web" is a part of 2 proxies' <pod>.<namespace>: web.ns1, web.ns2;`}, []string{"more"}},
		{"twelve", &ProxyLookupError{ID: "web", Matches: many}, http.StatusConflict,
			[]string{"12 proxies", "web-09.ns1 and 2 more;"}, []string{"web-10.ns1", "web-11.ns1"}},
		{"a huge id", &ProxyLookupError{ID: strings.Repeat("x", 100000)}, http.StatusNotFound, []string{"bytes)"}, []string{strings.Repeat("x", 256+1)}},
		{"not a lookup", fmt.Errorf("other"), http.StatusInternalServerError, nil, nil},
	} {
		if got := ProxyLookupStatus(tc.err); got != tc.status {
			t.Errorf("%s: status %d, want %d", tc.name, got, tc.status)
		}
		msg := tc.err.Error()
		for _, c := range tc.contains {
			if !strings.Contains(msg, c) {
				t.Errorf("%s: %q lacks %q", tc.name, msg, c)
			}
		}
		for _, c := range tc.lacks {
			if strings.Contains(msg, c) {
				t.Errorf("%s: %q has %q", tc.name, clip(msg), c)
			}
		}
	}
}
