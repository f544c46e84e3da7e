package xdsdebug

import (
	"testing"
	"time"

	"github.com/krteds/krteds/collections"
)

// twoNamespaces is a Streams of two proxies behind on endpoints, one in ns1 and one in ns2, and
// a third stream whose status has no proxy yet.
type twoNamespaces struct{}

func (twoNamespaces) Proxies() []Proxy {
	return []Proxy{{ConnID: "a", NodeID: "p.ns1", Namespace: "ns1"}, {ConnID: "b", NodeID: "p.ns2", Namespace: "ns2"}, {ConnID: "c", NodeID: "q.ns2", Namespace: "ns2"}}
}

func (twoNamespaces) Status(connID string, _ bool) (ConnStatus, bool) {
	st := ConnStatus{ConnID: connID, Types: map[string]TypeStatus{"eds": {Behind: &Behind{Since: time.Unix(100, 0), Reason: "not-reading", Stale: true}}}}
	if connID != "c" {
		st.Proxy = &collections.ConnectedProxy{ConnID: connID, ID: map[string]string{"a": "p.ns1", "b": "p.ns2"}[connID]}
	}
	return st, true
}

func (twoNamespaces) Resolve(*collections.View, string, string) (*collections.Resource, bool) {
	return nil, false
}
func (twoNamespaces) List(*collections.View, string) []*collections.Resource { return nil }
func (twoNamespaces) Holders(string, string) []Holding                       { return nil }

// TestStalenessIsScoped: another namespace's identity sees only its namespace's proxies behind
// (/debug/staleness, krteds status), a trusted caller every one; a stream whose status has no
// proxy yet does not break the answer.
func TestStalenessIsScoped(t *testing.T) {
	d := New(twoNamespaces{}, Options{})
	for _, tc := range []struct {
		scope Scope
		want  []string
	}{
		{Scope{Namespace: "ns1"}, []string{"a"}},
		{Scope{Namespace: "ns2"}, []string{"b", "c"}},
		{Scope{Namespace: "ns3"}, nil},
		{Everything, []string{"a", "b", "c"}},
	} {
		s := d.Staleness(tc.scope, false)
		var got []string
		for _, b := range s.Behind {
			got = append(got, b.ConnID)
		}
		if len(got) != len(tc.want) || s.Proxies != len(tc.want) || s.Stale != len(tc.want) {
			t.Errorf("scope %v: behind %v (%d proxies, %d stale), want %v", tc.scope, got, s.Proxies, s.Stale, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("scope %v: behind %v, want %v", tc.scope, got, tc.want)
			}
		}
	}
}
