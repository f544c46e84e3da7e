package policy

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"

	"github.com/krteds/krteds/collections"
)

// TestProxiesGroupedByShardsThenGroups: proxies are grouped by class through shards: each class
// with a member is there once, with its value, as long as one member is left, whichever member
// leaves or moves; and a class's members are spread over its shards, so that one proxy
// connecting rebuilds a shard's entry, not its whole class's.
func TestProxiesGroupedByShardsThenGroups(t *testing.T) {
	stop := test.NewStop(t)
	proxies := krt.NewStaticCollection[collections.Proxy](nil, nil, krt.WithStop(stop))
	keys := krt.NewCollection(krt.Collection[collections.Proxy](proxies), ProxyGroupKeysOf().Fn, krt.WithStop(stop))
	byShard := krt.NewIndex(keys, "byClassShard", ProxyClassShardKey)
	shards := krt.NewCollection(byShard.AsCollection(krt.WithStop(stop)), GroupShards(proxies, ClassKeyOf, ClassOf).Fn, krt.WithStop(stop))
	classes := krt.NewCollection(krt.NewIndex(shards, "byClass", ShardGroupKey[collections.ProxyClass]).AsCollection(krt.WithStop(stop)),
		GroupOfShards[collections.ProxyClass]().Fn, krt.WithStop(stop))

	a, b, c := collections.ProxyClass{Namespace: "a", Network: "n1"}, collections.ProxyClass{Namespace: "b"}, collections.ProxyClass{Namespace: "c", NodeName: "x"}
	proxy := func(i int, class collections.ProxyClass) collections.Proxy {
		return collections.Proxy{ConnectedProxy: collections.ConnectedProxy{ConnID: fmt.Sprint("delta-", i)}, Class: class}
	}
	for i := range 1000 {
		class := a
		if i >= 900 {
			class = b
		}
		proxies.UpdateObject(proxy(i, class))
	}
	waitClasses(t, classes, a, b)

	// Spread over shards: no shard of a holds more than a few times its share.
	largest := 0
	for _, s := range byShard.AsCollection(krt.WithStop(stop)).List() {
		largest = max(largest, len(s.Objects))
	}
	if largest == 0 || largest > 900/groupShards*4 {
		t.Fatalf("the largest shard has %d members of 1000 proxies", largest)
	}
	for _, s := range shards.List() {
		if s.Group != s.Value.Key() || (s.Group != a.Key() && s.Group != b.Key()) {
			t.Fatalf("shard %s of group %s holds %+v", s.Key, s.Group, s.Value)
		}
	}

	// b keeps its place while one member is left, and goes with the last.
	for i := 900; i < 999; i++ {
		proxies.DeleteObject(proxy(i, b).ResourceName())
	}
	proxies.UpdateObject(proxy(0, c)) // a member of a moves to a new class
	waitClasses(t, classes, a, b, c)
	proxies.DeleteObject(proxy(999, b).ResourceName())
	waitClasses(t, classes, a, c)
	// a member of c moving back leaves c empty; the last of a leaving leaves a's place to nobody.
	proxies.UpdateObject(proxy(0, a))
	waitClasses(t, classes, a)
	for i := range 900 {
		proxies.DeleteObject(proxy(i, a).ResourceName())
	}
	waitClasses(t, classes)
}

// waitClasses waits, on the collection's events, until it holds exactly want.
func waitClasses(t *testing.T, classes krt.Collection[collections.ProxyClass], want ...collections.ProxyClass) {
	t.Helper()
	keys := func(cs []collections.ProxyClass) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Key())
		}
		slices.Sort(out)
		return out
	}
	changed := make(chan struct{}, 1)
	reg := classes.Register(func(krt.Event[collections.ProxyClass]) {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	defer reg.UnregisterHandler()
	deadline := time.After(10 * time.Second)
	for {
		got := classes.List()
		if slices.Equal(keys(got), keys(want)) {
			for _, g := range got {
				if !slices.ContainsFunc(want, g.Equals) {
					t.Fatalf("class %s holds %+v", g.Key(), g)
				}
			}
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("classes %v, want %v", keys(got), keys(want))
		}
	}
}
