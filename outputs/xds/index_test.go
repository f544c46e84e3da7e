package xds

import (
	"slices"
	"testing"
)

// TestTouchedByAChange: a change reaches the streams holding its names, the names that follow
// them, and the wildcard streams; a name new to every stream has a wildcard stream look at every
// name, whatever other names the change carries and in whatever order.
func TestTouchedByAChange(t *testing.T) {
	names := newNameTable(0)
	x := newSubscriberIndex(names, func(_, name string) string {
		if name == "follower" {
			return "leader"
		}
		return ""
	})
	holder, wild, other := &stream{id: "a", delta: true}, &stream{id: "b", delta: true}, &stream{id: "c", delta: true}
	for _, c := range []*stream{holder, wild, other} {
		x.addStream(c)
	}
	known, follower := names.acquire("known"), names.acquire("follower")
	x.watch(tEndpoint, holder, known, follower)
	x.watch(tEndpoint, wild, known)
	x.setWildcard(tEndpoint, wild, true)

	for _, tc := range []struct {
		name    string
		changed []string
		// want per stream: nil entry absent; "all" for every name
		holder, wild []nameID
		wildAll      bool
		ids          []nameID
	}{
		{name: "a held name", changed: []string{"known"}, holder: []nameID{known}, wild: []nameID{known}, ids: []nameID{known}},
		{name: "what a name follows", changed: []string{"leader"}, holder: []nameID{follower}, wildAll: true, ids: []nameID{follower}},
		{name: "a new name, then a held one", changed: []string{"new", "known"}, holder: []nameID{known}, wildAll: true, ids: []nameID{known}},
		{name: "a held name, then a new one", changed: []string{"known", "new"}, holder: []nameID{known}, wildAll: true, ids: []nameID{known}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			streams, ids, _ := x.touched(tEndpoint, tc.changed)
			if got := streams[holder]; !slices.Equal(got, tc.holder) {
				t.Errorf("holder told %v, want %v", got, tc.holder)
			}
			got, told := streams[wild]
			switch {
			case !told:
				t.Errorf("the wildcard stream was not told")
			case tc.wildAll && got != nil:
				t.Errorf("the wildcard stream told %v, want every name", got)
			case !tc.wildAll && !slices.Equal(got, tc.wild):
				t.Errorf("the wildcard stream told %v, want %v", got, tc.wild)
			}
			if _, ok := streams[other]; ok {
				t.Errorf("a stream holding none of the names was told")
			}
			if !slices.Equal(ids, tc.ids) {
				t.Errorf("changed ids %v, want %v", ids, tc.ids)
			}
		})
	}
}
