package serving

import (
	"bytes"
	"fmt"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// TestProxiesOfOneClassShareOneCLA connects many proxies: those of one class get byte-identical
// CLAs computed once; a second class adds exactly one more CLA; proxies joining an existing class
// cause no CLA recomputation.
func TestProxiesOfOneClassShareOneCLA(t *testing.T) {
	r := newRig(t, preferCloseMesh()...)
	claCount := func() int {
		set := r.CLAs.GetKey(fooCluster)
		distinct := map[*collections.Resource]bool{}
		for _, res := range set.ByClass {
			distinct[res] = true
		}
		return len(distinct)
	}

	get := func(i int, loc *core.Locality) []byte {
		n := sidecar(fmt.Sprintf("10.9.1.%d", i), "ns1")
		n.Locality = loc
		s := r.Open(n)
		_ = s.Request(adsclient.TypeCLA, fooCluster)
		resp := recv(t, s)
		return resp.Resources[0].Value
	}
	z1 := &core.Locality{Region: "r1", Zone: "z1"}
	first := get(0, z1)
	recomputes := func() uint64 {
		n, _ := r.Description.Snapshot().Node(graphs.NameCLAs)
		return n.Recomputes
	}
	before := recomputes()
	for i := 1; i < 20; i++ {
		if b := get(i, z1); !bytes.Equal(b, first) {
			t.Fatalf("proxy %d of the same class got different bytes", i)
		}
	}
	if n := claCount(); n != 1 {
		t.Fatalf("one class must give one CLA, got %d", n)
	}
	// A proxy of a new class: its CLA is computed after whatever the proxies before it caused
	// (classes reach the CLA collection in order), so the count now is final.
	other := get(99, &core.Locality{Region: "r2", Zone: "z3"})
	if proto.Equal(wrap(other), wrap(first)) {
		t.Fatal("another locality must get other priorities")
	}
	if after := recomputes(); after != before+1 {
		t.Fatalf("19 proxies joining an existing class and one a new class recomputed CLAs %d times, want 1", after-before)
	}
	if n := claCount(); n != 2 {
		t.Fatalf("two classes must give two CLAs, got %d", n)
	}
}

func wrap(b []byte) proto.Message {
	return &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: b}}
}
