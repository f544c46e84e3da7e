package registry

import (
	"slices"
	"testing"
	"time"

	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"

	"github.com/krteds/krteds/collections"
)

// TestEntryHostServices holds the service of a host in a namespace to istiod's serviceentry
// registry and sidecar scope: one per (host, namespace) (the ServiceIndex's
// HostnameAndNamespace keeps the oldest of the namespace: SortServicesByCreationTime), the
// ports of the namespace's later entries added where appendSidecarServices merges them
// (canMergeServices: same resolution, labels, workloadSelector and exportTo; a port number
// already there stays as it is), SharedHost when another namespace defines the host too.
func TestEntryHostServices(t *testing.T) {
	const h = "api.example.com"
	t0 := time.Unix(1000, 0)
	http := collections.ServicePort{Name: "http", Port: 80, Protocol: "TCP"}
	web := collections.ServicePort{Name: "web", Port: 80, Protocol: "TCP"}
	tls := collections.ServicePort{Name: "tls", Port: 443, Protocol: "TCP"}
	grpc := collections.ServicePort{Name: "grpc", Port: 9090, Protocol: "TCP"}
	entry := func(ns, name string, age int, mut func(*collections.ServiceEntry), ports ...collections.ServicePort) collections.ServiceEntry {
		e := collections.ServiceEntry{Name: name, Namespace: ns, Created: t0.Add(time.Duration(age) * time.Second), Hosts: []string{h},
			Ports: ports, Resolution: collections.ClientSideLB}
		if mut != nil {
			mut(&e)
		}
		return e
	}
	cases := []struct {
		name    string
		entries []collections.ServiceEntry // those of namespace a; others elsewhere
		others  []collections.ServiceEntry
		want    func(*collections.ServiceInfo) bool
		wantStr string
	}{{
		name:    "one entry",
		entries: []collections.ServiceEntry{entry("a", "one", 0, nil, http)},
		want: func(s *collections.ServiceInfo) bool {
			return s.ResourceName() == "a/"+h && s.ServiceEntry == "one" && s.Created.Equal(t0) && !s.SharedHost && slices.Equal(s.Ports, []collections.ServicePort{http})
		},
		wantStr: "a/api.example.com from one, its ports, not shared",
	}, {
		name:    "the oldest entry's settings, the others' new port numbers added",
		entries: []collections.ServiceEntry{entry("a", "young", 9, nil, web, tls), entry("a", "old", 0, func(e *collections.ServiceEntry) { e.MeshExternal = true }, http, grpc)},
		want: func(s *collections.ServiceInfo) bool {
			return s.ServiceEntry == "old" && s.MeshExternal && s.Created.Equal(t0) && slices.Equal(s.Ports, []collections.ServicePort{http, grpc, tls})
		},
		wantStr: "old's, ports http/80 grpc/9090 tls/443",
	}, {
		name:    "created in the same second: the lower name is the oldest",
		entries: []collections.ServiceEntry{entry("a", "b-entry", 0, nil, web), entry("a", "a-entry", 0, nil, http)},
		want: func(s *collections.ServiceInfo) bool {
			return s.ServiceEntry == "a-entry" && slices.Equal(s.Ports, []collections.ServicePort{http})
		},
		wantStr: "a-entry's, port 80 named http",
	}, {
		name: "another resolution, labels, workloadSelector or exportTo: no port added",
		entries: []collections.ServiceEntry{
			entry("a", "base", 0, nil, http),
			entry("a", "dns", 1, func(e *collections.ServiceEntry) { e.Resolution = collections.DNSLB }, tls),
			entry("a", "labelled", 2, func(e *collections.ServiceEntry) { e.Labels = map[string]string{"x": "y"} }, grpc),
			entry("a", "selecting", 3, func(e *collections.ServiceEntry) { e.Selector = map[string]string{} }, collections.ServicePort{Name: "s", Port: 1}),
			entry("a", "private", 4, func(e *collections.ServiceEntry) { e.ExportTo = []string{"."} }, collections.ServicePort{Name: "p", Port: 2}),
		},
		want: func(s *collections.ServiceInfo) bool {
			return s.ServiceEntry == "base" && slices.Equal(s.Ports, []collections.ServicePort{http})
		},
		wantStr: "base's only",
	}, {
		name:    "another namespace defines the host: shared, settings still this namespace's",
		entries: []collections.ServiceEntry{entry("a", "one", 5, nil, http)},
		others:  []collections.ServiceEntry{entry("b", "other", 0, func(e *collections.ServiceEntry) { e.ExportTo = []string{"*"} }, tls)},
		want: func(s *collections.ServiceInfo) bool {
			return s.SharedHost && s.Namespace == "a" && s.ExportTo == nil && slices.Equal(s.Ports, []collections.ServicePort{http})
		},
		wantStr: "shared, a's",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			all := krt.NewStaticCollection(nil, append(slices.Clone(tc.entries), tc.others...), krt.WithStop(test.NewStop(t)))
			byHost := krt.NewIndex[string, collections.ServiceEntry](all, "byHost", EntryHosts)
			got := EntryHostServices(collections.DefaultConfig(), all, byHost).Fn(krt.TestingDummyContext{},
				krt.IndexObject[string, collections.ServiceEntry]{Key: "a/" + h, Objects: tc.entries})
			if got == nil || !tc.want(*got) {
				t.Fatalf("got %+v, want %s", got, tc.wantStr)
			}
		})
	}
}
