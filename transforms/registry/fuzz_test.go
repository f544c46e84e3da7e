package registry

import (
	"encoding/json"
	"net/netip"
	"testing"

	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/transforms/transformtest"
)

// The fuzz targets feed arbitrary JSON-decoded objects to the transforms: none may panic, and
// every endpoint they produce must be well formed.

func FuzzConvertService(f *testing.F) {
	transformtest.SeedJSON(f, fixtures.Service("ns1", "foo", fixtures.HTTP...))
	f.Add([]byte(`{"metadata":{"name":"x","namespace":"y","annotations":{"networking.istio.io/exportTo":",,~,.","networking.istio.io/traffic-distribution":"PreferSameNode"}},
		"spec":{"type":"ExternalName","clusterIP":"None","ports":[{"protocol":"UDP"},{"targetPort":"named"}],"trafficDistribution":""}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var s corev1.Service
		if json.Unmarshal(data, &s) != nil {
			return
		}
		si := ConvertService(collections.DefaultConfig(), &s, nil)
		if si == nil || si.Hostname == "" {
			t.Fatalf("no ServiceInfo for %s", data)
		}
		if !si.Equals(si) {
			t.Fatal("Equals is not reflexive")
		}
		for _, p := range si.Ports {
			if p.Port < 1 || p.Port > 65535 {
				t.Fatalf("port %d out of range kept", p.Port)
			}
		}
	})
}

func FuzzWorkloads(f *testing.F) {
	transformtest.SeedJSON(f, fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", "n1"))
	f.Add([]byte(`{"metadata":{"name":"p","generateName":"cj-12345678-","labels":{"istio-locality":"a.b.c.d","topology.istio.io/locality":""},
		"ownerReferences":[{"kind":"Job","name":"cj-12345678","controller":true}]},"status":{"phase":"Running","podIPs":[{"ip":""}]}}`))
	fn := workloadFn(collections.DefaultConfig(), StaticWorkloadInputs(test.NewStop(f)))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p corev1.Pod
		if json.Unmarshal(data, &p) != nil {
			return
		}
		if w := fn(&p); w != nil && (w.Meta == nil || !w.Meta.Equals(w.Meta) || w.ResourceName() != p.Namespace+"/"+p.Name) {
			t.Fatalf("bad workload %+v", w)
		}
	})
}

func FuzzParseProxy(f *testing.F) {
	f.Add("sidecar~10.1.0.1~foo-1.ns1~ns1.svc.cluster.local", "")
	f.Add("router~fd00::1~gw.istio-system~istio-system.svc.cluster.local", "ns")
	f.Add("~~~", "")
	f.Fuzz(func(t *testing.T, id, ns string) {
		p, err := collections.ParseProxy("c", id, collections.NodeMetadata{Namespace: ns}, collections.Locality{})
		if err == nil && (p.Namespace == "" || p.IP == "") {
			t.Fatalf("accepted %q without namespace or IP: %+v", id, p)
		}
	})
}

// FuzzServiceEntries feeds a ServiceEntry and a WorkloadEntry through their conversions and into
// the endpoint shard of every host: nothing panics, every host kept is servable, every port is in
// range, and every endpoint of a non-DNS host has an IP address and a port.
func FuzzServiceEntries(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"se","namespace":"ns1"},"spec":{"hosts":["a.example.com","*.x.com","b","c.ns1.svc.cluster.local"],
		"resolution":"STATIC","ports":[{"number":80,"name":"http","targetPort":8080},{"number":0},{"number":70000},{"number":80}],
		"endpoints":[{"address":"10.0.0.1","ports":{"http":9090},"weight":4},{"address":"fe80::1%eth0"},{"address":"db.example.com"},{"address":"unix:///s"},{}]}}`),
		[]byte(`{"metadata":{"name":"vm","namespace":"ns1","labels":{"app":"x"}},"spec":{"address":"10.0.0.2","labels":{"app":"y"},"locality":"r/z/s"}}`))
	f.Add([]byte(`{"metadata":{"name":"se","namespace":"ns1"},"spec":{"hosts":["a.example.com"],"resolution":"DNS","ports":[{"number":443,"name":"tls","protocol":"UDP"}],
		"workloadSelector":{"labels":{"app":"x","topology.kubernetes.io/zone":"z"}}}}`),
		[]byte(`{"metadata":{"name":"vm","namespace":"ns1","annotations":{"proxy.istio.io/health-checks-enabled":"true"}},"spec":{"address":"vm.example.com","labels":{"app":"x"}},
		"status":{"conditions":[{"type":"Healthy","status":"True"}]}}`))
	stop := test.NewStop(f)
	cfg := collections.DefaultConfig()
	workloads := StaticWorkloadInputs(test.NewStop(f), fixtures.Pod("ns1", "x-1", "x", "10.0.0.3", "n1"), fixtures.ZoneNode("n1", "r", "z"))
	raw := krt.NewStaticCollection[*networkingclient.ServiceEntry](nil, nil, krt.WithStop(stop))
	seIn := ServiceEntryInputs{Namespaces: krt.NewStaticCollection[*corev1.Namespace](nil, nil, krt.WithStop(stop)),
		SystemNetwork: workloads.SystemNetwork, Entries: raw, EntriesByHost: krt.NewIndex(raw, "byHost", ServiceEntryHosts)}
	wc := krt.NewStaticCollection[collections.WorkloadEntry](nil, nil, krt.WithStop(stop))
	entries := krt.NewStaticCollection[collections.ServiceEntry](nil, nil, krt.WithStop(stop))
	slices := krt.NewStaticCollection[collections.SliceEndpoints](nil, nil, krt.WithStop(stop))
	byNsHost, byHost := krt.NewIndex(entries, "byNamespaceHost", EntryNamespaceHosts), krt.NewIndex(entries, "byHost", EntryHosts)
	in := ServiceEndpointInputs{Slices: slices, SlicesByService: krt.NewIndex(slices, "byService", SliceService),
		ServiceEntries: entries, EntriesByNamespaceHost: byNsHost, WorkloadEntries: wc, WorkloadEntriesByNamespace: krt.NewIndex(wc, "byNamespace", ByNamespace), Workloads: workloads}
	f.Fuzz(func(t *testing.T, seData, weData []byte) {
		var se networkingclient.ServiceEntry
		var we networkingclient.WorkloadEntry
		if json.Unmarshal(seData, &se) != nil || json.Unmarshal(weData, &we) != nil {
			return
		}
		raw.Reset([]*networkingclient.ServiceEntry{&se})
		_, entry := ServiceEntries(cfg, seIn).Fn(krt.TestingDummyContext{}, &se)
		_, wentry := WorkloadEntries(cfg, workloads.SystemNetwork).Fn(krt.TestingDummyContext{}, &we)
		if entry == nil {
			return
		}
		if !entry.Equals(*entry) || (wentry != nil && !wentry.Equals(*wentry)) {
			t.Fatal("Equals is not reflexive")
		}
		var wes []collections.WorkloadEntry
		if wentry != nil {
			wes = append(wes, *wentry)
		}
		wc.Reset(wes)
		entries.Reset([]collections.ServiceEntry{*entry})
		for _, h := range entry.Hosts {
			if hostProblem(cfg, h) != "" {
				t.Fatalf("host %q kept", h)
			}
			svc := *EntryHostServices(cfg, entries, byHost).Fn(krt.TestingDummyContext{},
				krt.IndexObject[string, collections.ServiceEntry]{Key: entry.Namespace + "/" + h, Objects: []collections.ServiceEntry{*entry}})
			for _, p := range svc.Ports {
				if p.Port < 1 || p.Port > 65535 {
					t.Fatalf("port %d kept", p.Port)
				}
			}
			shard := ServiceEndpointsOf(cfg, in).Fn(krt.TestingDummyContext{}, svc)
			for _, e := range shard.Endpoints {
				if e.Meta == nil || e.Port == 0 || e.Port > 65535 {
					t.Fatalf("malformed endpoint %+v", e)
				}
				if ip, err := netip.ParseAddr(e.Address); !svc.Resolution.IsDNS() && (err != nil || ip.Zone() != "") {
					t.Fatalf("endpoint address %q of a %s host", e.Address, svc.Resolution)
				}
			}
		}
	})
}
