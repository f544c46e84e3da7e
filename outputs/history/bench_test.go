package history

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/krteds/krteds/collections"
)

// BenchmarkRecordMemory measures the record at the large size's 10 000 services with every ring
// full: 32 changes a service, each one endpoint's change of health (of 10), the CLA versions of
// two proxy classes, acknowledged by 1 000 proxies and rejected by one. The endpoints are the
// graph's (made before the measure); what the record adds is reported per service.
func BenchmarkRecordMemory(b *testing.B) {
	const services, endpoints = 10000, 10
	type svc struct {
		name, slice, cluster string
		eps                  [2][]*collections.Endpoint // all healthy; the first unhealthy
	}
	var versions [DefaultPerService + 1]string // the slices' resourceVersions, the graph's strings
	for k := range versions {
		versions[k] = fmt.Sprint(1000 + k)
	}
	all := make([]svc, services)
	for i := range all {
		s := &all[i]
		s.name = fmt.Sprintf("ns%d/svc%d", i%100, i)
		s.slice, s.cluster = s.name+"-abc", "outbound|80||"+s.name
		for k := range 2 {
			for e := range endpoints {
				h := collections.Healthy
				if k == 1 && e == 0 {
					h = collections.UnHealthy
				}
				s.eps[k] = append(s.eps[k], &collections.Endpoint{Address: fmt.Sprintf("10.%d.%d.%d", i/250, i%250, e+1), Port: 8080,
					PortName: "http", Health: h, Slice: "s", Pod: fmt.Sprintf("ns/p%d-%d", i, e)})
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		st := New(0)
		now := time.Now()
		for i := range all {
			s := &all[i]
			ns, name, _ := cut(s.name)
			var prev *collections.ServiceEndpoints
			for k := range DefaultPerService + 1 {
				cause := collections.Cause{Kind: "EndpointSlice", Name: s.slice, Version: versions[k], Trigger: now.UnixNano(), Seen: now.UnixNano() + int64(k)}
				cur := &collections.ServiceEndpoints{Namespace: ns, Name: name, Endpoints: s.eps[k%2], Cause: cause}
				st.endpointsChanged(prev, cur, now)
				set := collections.ResourceSet{Name: s.cluster, TypeURL: "t", Service: s.name, ByClass: map[string]*collections.Resource{
					"a": {Version: uint64(k), Cause: cause}, "b": {Version: uint64(k + 100), Cause: cause}}}
				st.clasComputed(set)
				for range 1000 {
					st.Delivered(cause, "p", now, now, "")
				}
				st.Delivered(cause, "sidecar~10.0.0.1~p.ns~ns.svc.cluster.local", now, now, "bad endpoint")
				prev = cur
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if svcs, changes := st.Size(); svcs != services || changes != services*DefaultPerService {
			b.Fatalf("%d services, %d changes", svcs, changes)
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/services, "B/service")
		runtime.KeepAlive(st)
	}
}

func cut(key string) (ns, name string, ok bool) {
	for i := range len(key) {
		if key[i] == '/' {
			return key[:i], key[i+1:], true
		}
	}
	return "", key, false
}
