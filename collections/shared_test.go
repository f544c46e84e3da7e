package collections

import (
	"runtime"
	"testing"
)

// Equal values share one pointer while held, and their entry goes with the last holder.
func TestSharedByContent(t *testing.T) {
	var s Shared[TopologyMeta]
	a := s.Get(TopologyMeta{NodeName: "n1", Locality: Locality{Region: "r"}})
	b := s.Get(TopologyMeta{NodeName: "n1", Locality: Locality{Region: "r"}})
	c := s.Get(TopologyMeta{NodeName: "n2", Locality: Locality{Region: "r"}})
	if a != b || a == c || s.Len() != 2 {
		t.Fatalf("shared %v, distinct %v, %d entries", a == b, a != c, s.Len())
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.KeepAlive(c)
	a, b, c = nil, nil, nil
	for i := 0; i < 20 && s.Len() > 0; i++ {
		runtime.GC()
		runtime.Gosched()
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("%d entries outlived their values", n)
	}
	if again := s.Get(TopologyMeta{NodeName: "n1"}); again.NodeName != "n1" || s.Len() != 1 {
		t.Fatal("a value shared again")
	}
}

// Pods of one workload on different nodes share the workload part; an edit never writes the
// shared parts in place.
func TestEndpointMetaSharesItsParts(t *testing.T) {
	w := WorkloadMeta{Namespace: "ns1", WorkloadName: "foo", TLSMode: "istio"}
	m1 := NewEndpointMeta(w, TopologyMeta{NodeName: "n1"}, "", "")
	m2 := NewEndpointMeta(w, TopologyMeta{NodeName: "n2"}, "", "")
	if m1.WorkloadMeta != m2.WorkloadMeta || m1.TopologyMeta == m2.TopologyMeta {
		t.Fatal("parts not shared by content")
	}
	m3 := m1.Edit(func(m *EndpointMeta) { m.Weight = 7 })
	if m1.Weight != 0 || m2.Weight != 0 || m3.Weight != 7 || m3.NodeName != "n1" || m3.TopologyMeta != m1.TopologyMeta {
		t.Fatalf("edit: %d %d %d %q", m1.Weight, m2.Weight, m3.Weight, m3.NodeName)
	}
	if !m1.Equals(NewEndpointMeta(w, TopologyMeta{NodeName: "n1"}, "", "")) || m1.Equals(m3) {
		t.Fatal("Equals")
	}
}
