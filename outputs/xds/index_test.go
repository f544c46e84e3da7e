package xds

import (
	"fmt"
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
			streams, ids := touchedBy(x, tEndpoint, tc.changed)
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

// touchedBy is touched as a map of the streams told to the names each was told of.
func touchedBy(x *subscriberIndex, t typ, names []string) (map[*stream][]nameID, []nameID) {
	list, ids, _ := x.touched(t, names)
	out := map[*stream][]nameID{}
	for _, tc := range *list {
		if _, twice := out[tc.st]; twice {
			panic("a stream told twice of one change")
		}
		out[tc.st] = tc.ids
	}
	touches.Put(list)
	return out, ids
}

// TestTouchedWithoutWildcards: with no wildcard stream, a change of one name that nothing
// follows tells each stream holding it, and only those (the shared list's path); with two names,
// each stream is told of those it holds.
func TestTouchedWithoutWildcards(t *testing.T) {
	names := newNameTable(0)
	x := newSubscriberIndex(names, func(string, string) string { return "" })
	a, b, c := &stream{id: "a", delta: true}, &stream{id: "b", delta: true}, &stream{id: "c", delta: true}
	for _, st := range []*stream{a, b, c} {
		x.addStream(st)
	}
	one, two := names.acquire("one"), names.acquire("two")
	x.watch(tEndpoint, a, one)
	x.watch(tEndpoint, b, one, two)
	x.watch(tEndpoint, c, two)

	got, ids := touchedBy(x, tEndpoint, []string{"one"})
	if len(got) != 2 || !slices.Equal(got[a], []nameID{one}) || !slices.Equal(got[b], []nameID{one}) || !slices.Equal(ids, []nameID{one}) {
		t.Fatalf("a change of one: %v (ids %v), want a and b told of it", got, ids)
	}
	got, ids = touchedBy(x, tEndpoint, []string{"one", "two"})
	if len(got) != 3 || !slices.Equal(got[a], []nameID{one}) || !slices.Equal(got[b], []nameID{one, two}) || !slices.Equal(got[c], []nameID{two}) || len(ids) != 2 {
		t.Fatalf("a change of both: %v (ids %v)", got, ids)
	}
	if got, ids = touchedBy(x, tEndpoint, []string{"unknown"}); len(got) != 0 || len(ids) != 0 {
		t.Fatalf("a change of a name nobody holds: %v (ids %v), want nobody told", got, ids)
	}
}

// BenchmarkTouchedByOneName: a change of one name held by 10 000 streams (a default mesh, every
// proxy subscribed to every cluster) turned into the streams to tell.
func BenchmarkTouchedByOneName(b *testing.B) {
	names := newNameTable(0)
	x := newSubscriberIndex(names, func(string, string) string { return "" })
	id := names.acquire("outbound|80||svc.ns.svc.cluster.local")
	for i := range 10000 {
		st := &stream{id: fmt.Sprint(i), delta: true}
		x.addStream(st)
		x.watch(tEndpoint, st, id)
	}
	changed := []string{"outbound|80||svc.ns.svc.cluster.local"}
	b.ReportAllocs()
	for b.Loop() {
		list, _, _ := x.touched(tEndpoint, changed)
		if len(*list) != 10000 {
			b.Fatalf("%d streams told, want 10000", len(*list))
		}
		touches.Put(list)
	}
}
