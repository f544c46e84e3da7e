package xds

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

func collectionOf(members ...string) *collections.LEDSCollection {
	c := &collections.LEDSCollection{Name: "c/*"}
	for _, m := range members {
		name, version, _ := strings.Cut(m, "@")
		var v uint64
		_, _ = fmt.Sscan(version, &v)
		c.Members = append(c.Members, &collections.Resource{Name: name, Version: v})
	}
	return c
}

// diffCollection sends what the client does not hold in the current version (update: it held
// an older one) and removes what it holds and the collection no longer lists, whatever the
// order of the two lists.
func TestDiffCollection(t *testing.T) {
	for _, c := range []struct {
		name         string
		old, cur     *collections.LEDSCollection
		sent, remove []string
	}{
		{"first", nil, collectionOf("a@1", "b@1"), []string{"a@1 new", "b@1 new"}, nil},
		{"gone", collectionOf("a@1", "b@1"), nil, nil, []string{"a", "b"}},
		{"same", collectionOf("a@1", "b@1"), collectionOf("a@1", "b@1"), nil, nil},
		{"one changed", collectionOf("a@1", "b@1", "c@1"), collectionOf("a@1", "b@2", "c@1"), []string{"b@2 update"}, nil},
		{"inserted", collectionOf("a@1", "c@1"), collectionOf("a@1", "b@1", "c@1"), []string{"b@1 new"}, nil},
		{"removed", collectionOf("a@1", "b@1", "c@1"), collectionOf("a@1", "c@2"), []string{"c@2 update"}, []string{"b"}},
		{"reordered", collectionOf("a@1", "b@1", "c@1"), collectionOf("c@1", "a@1", "d@1"), []string{"d@1 new"}, []string{"b"}},
		{"appended", collectionOf("a@1"), collectionOf("a@1", "b@1"), []string{"b@1 new"}, nil},
		{"truncated", collectionOf("a@1", "b@1"), collectionOf("a@1"), nil, []string{"b"}},
	} {
		var sent, removed []string
		diffCollection(c.old, c.cur, func(m *collections.Resource, update bool) {
			s := fmt.Sprintf("%s@%d", m.Name, m.Version)
			if update {
				s += " update"
			} else {
				s += " new"
			}
			sent = append(sent, s)
		}, func(name string) { removed = append(removed, name) })
		slices.Sort(removed)
		if !slices.Equal(sent, c.sent) || !slices.Equal(removed, c.remove) {
			t.Errorf("%s: sent %q removed %q, want %q and %q", c.name, sent, removed, c.sent, c.remove)
		}
	}
}

// TestLEDSWaitsForTheNewClassCollections: when a proxy's class changes, the collections it
// follows are looked at again; while its new class's CLA is being computed they wait, as a
// pending CLA does: no removal of every member followed by their return. Once computed, only
// what differs is sent.
func TestLEDSWaitsForTheNewClassCollections(t *testing.T) {
	fs := startFake(t)
	const glob = "xdstp://krteds/envoy.config.endpoint.v3.LbEndpoint/c/c1/r~z~~p0/*"
	fs.src.setCollection(glob, "m1@1", "m2@1")
	s, err := adsclient.OpenDelta(context.Background(), fs.cc, sidecarNode(1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Subscribe(typeLbEndpoint, []string{glob}, nil); err != nil {
		t.Fatal(err)
	}
	first, err := s.Recv(10 * time.Second)
	if err != nil || len(first.Resources) != 2 {
		t.Fatalf("first answer: %v, %v", first, err)
	}
	if err := s.Ack(first); err != nil {
		t.Fatal(err)
	}
	probes := 0
	// until returns what the stream sends of LEDS before the answer to a new probe: everything
	// due before it has been sent by then.
	until := func() (sent, removed []string) {
		t.Helper()
		probes++
		name := fmt.Sprintf("probe-%d", probes)
		fs.src.set(tRoute.url(), name)
		if err := s.Subscribe(tRoute.url(), []string{name}, nil); err != nil {
			t.Fatal(err)
		}
		for {
			r, err := s.Recv(10 * time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Ack(r); err != nil {
				t.Fatal(err)
			}
			if r.TypeUrl == tRoute.url() {
				return sent, removed
			}
			for _, res := range r.Resources {
				sent = append(sent, res.Name)
			}
			removed = append(removed, r.RemovedResources...)
		}
	}
	var connID string
	for _, st := range fs.srv.Debug().Statuses(xdsdebug.Everything, false) {
		connID = st.ConnID
	}
	fs.src.setCollectionPending(glob, true)
	fs.src.setView(connID, &collections.View{Key: "v2", ClassKey: "c2", Namespace: "ns1"})
	if sent, removed := until(); len(sent)+len(removed) > 0 {
		t.Fatalf("while the new class's CLA is computed, the stream sent %v and removed %v", sent, removed)
	}
	// The new class has the same members: nothing to send.
	fs.src.setCollection(glob, "m1@1", "m2@1")
	fs.src.setCollectionPending(glob, false)
	if sent, removed := until(); len(sent)+len(removed) > 0 {
		t.Fatalf("the new class's collection is the old one's; the stream sent %v and removed %v", sent, removed)
	}
	fs.src.setCollection(glob, "m1@1", "m3@1")
	if sent, removed := until(); !slices.Equal(sent, []string{"m3"}) || !slices.Equal(removed, []string{"m2"}) {
		t.Fatalf("a member replaced: sent %v, removed %v; want [m3], [m2]", sent, removed)
	}
}
