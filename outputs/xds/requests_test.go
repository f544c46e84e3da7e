package xds

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/cespare/xxhash/v2"
	"github.com/google/go-cmp/cmp"
)

// requestSeeds are requests of both protocols with every field set, names repeated, empty and
// known to the table.
func requestSeeds() []proto.Message {
	node := &core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local", Cluster: "c"}
	return []proto.Message{
		&discovery.DiscoveryRequest{},
		&discovery.DiscoveryRequest{VersionInfo: "v1", Node: node, ResourceNames: []string{"known", "other", "known", ""}, TypeUrl: tEndpoint.url(),
			ResponseNonce: "7", ErrorDetail: &rpcstatus.Status{Code: 3, Message: "bad"}, ResourceLocators: []*discovery.ResourceLocator{{Name: "l"}}},
		&discovery.DeltaDiscoveryRequest{},
		&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: tCluster.url(), ResourceNamesSubscribe: []string{"known", "new", "*"},
			ResourceNamesUnsubscribe: []string{"gone", "known"}, InitialResourceVersions: map[string]string{"known": "1f", "x": "", "": "2"},
			ResponseNonce: "9", ErrorDetail: &rpcstatus.Status{Code: 2}, ResourceLocatorsSubscribe: []*discovery.ResourceLocator{{Name: "s"}}},
	}
}

func decodeBoth(t testing.TB, b []byte, empty func() proto.Message, names *nameTable) (proto.Message, error, proto.Message, error) {
	want, got := empty(), empty()
	werr := proto.Unmarshal(b, want)
	ok, gerr := decodeRequest(mem.BufferSlice{mem.SliceBuffer(b)}, got, names)
	if !ok {
		t.Fatalf("%T was not decoded as a request", got)
	}
	return want, werr, got, gerr
}

// TestRequestDecodingIsProtos: requests decode as the proto decoder decodes them, the names the
// table holds sharing its copy.
func TestRequestDecodingIsProtos(t *testing.T) {
	names := newNameTable(0)
	known := names.name(names.acquire(fmt.Sprint("kn", "own")))
	for _, m := range requestSeeds() {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		empty := func() proto.Message { return m.ProtoReflect().New().Interface() }
		want, werr, got, gerr := decodeBoth(t, b, empty, names)
		if werr != nil || gerr != nil {
			t.Fatalf("%T: %v / %v", m, werr, gerr)
		}
		if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
			t.Fatalf("%T decodes otherwise than proto's decoder:\n%s", m, d)
		}
		var decoded []string
		switch r := got.(type) {
		case *discovery.DiscoveryRequest:
			decoded = r.ResourceNames
		case *discovery.DeltaDiscoveryRequest:
			decoded = append(r.ResourceNamesSubscribe, r.ResourceNamesUnsubscribe...)
			for k := range r.InitialResourceVersions {
				decoded = append(decoded, k)
			}
		}
		for _, n := range decoded {
			if n == "known" && unsafe.StringData(n) != unsafe.StringData(known) {
				t.Errorf("%T: a name the table holds is a copy of its own", m)
			}
		}
	}
}

// FuzzRequestDecoding: whatever bytes a client sends, the request decoder fails when the proto
// decoder fails and otherwise decodes the same message.
func FuzzRequestDecoding(f *testing.F) {
	for _, m := range requestSeeds() {
		b, _ := proto.Marshal(m)
		f.Add(b, m.ProtoReflect().Descriptor().Name() == "DeltaDiscoveryRequest")
	}
	f.Add([]byte{0x1a, 0x02, 0xff, 0xfe}, false) // a name that is not UTF-8
	f.Add([]byte{0x2a, 0x03, 0x0a, 0x01, 0x80}, true)
	f.Add([]byte{0x18, 0x01}, false) // field 3 with the wrong wire type
	names := newNameTable(0)
	names.acquire("known")
	f.Fuzz(func(t *testing.T, b []byte, delta bool) {
		empty := func() proto.Message { return &discovery.DiscoveryRequest{} }
		if delta {
			empty = func() proto.Message { return &discovery.DeltaDiscoveryRequest{} }
		}
		want, werr, got, gerr := decodeBoth(t, b, empty, names)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("proto's decoder: %v; the request decoder: %v", werr, gerr)
		}
		if werr == nil {
			if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
				t.Fatalf("decodes otherwise than proto's decoder:\n%s", d)
			}
		}
		if delta {
			return
		}
		// The same through the state-of-the-world request, names read when asked for.
		var lazy sotwRequest
		err := decodeSotwRequest(mem.BufferSlice{mem.SliceBuffer(b)}, &lazy)
		if err == nil {
			lazy.req.ResourceNames, err = lazy.names(names)
		}
		if (werr == nil) != (err == nil) {
			t.Fatalf("proto's decoder: %v; the state-of-the-world request: %v", werr, err)
		}
		if werr == nil {
			if d := cmp.Diff(want, &lazy.req, protocmp.Transform()); d != "" {
				t.Fatalf("the state-of-the-world request decodes otherwise than proto's decoder:\n%s", d)
			}
		}
		// The same in pieces, as gRPC hands over a request received in several frames.
		for _, size := range []int{1, 2, 3, 7, 64} {
			var split sotwRequest
			err := decodeSotwRequest(inPieces(b, size), &split)
			if err == nil {
				split.req.ResourceNames, err = split.names(names)
			}
			if (werr == nil) != (err == nil) {
				t.Fatalf("in pieces of %d: proto's decoder: %v; the state-of-the-world request: %v", size, werr, err)
			}
			if werr == nil {
				if split.hash != lazy.hash || split.n != lazy.n {
					t.Fatalf("in pieces of %d: hash %x of %d names, whole %x of %d", size, split.hash, split.n, lazy.hash, lazy.n)
				}
				if d := cmp.Diff(want, &split.req, protocmp.Transform()); d != "" {
					t.Fatalf("in pieces of %d, decodes otherwise than proto's decoder:\n%s", size, d)
				}
			}
		}
	})
}

// inPieces is b in pieces of size bytes (the last shorter), each its own buffer.
func inPieces(b []byte, size int) mem.BufferSlice {
	var s mem.BufferSlice
	for len(b) > 0 {
		n := min(size, len(b))
		s = append(s, mem.SliceBuffer(slices.Clone(b[:n])))
		b = b[n:]
	}
	return s
}

// TestSotwRequestIsReadInPieces: a request received in pieces (gRPC's frames, down to a byte
// each) is read without joining them, whatever piece a field starts or ends in, and decodes as the
// whole request does; its bytes are kept until the stream releases the request.
func TestSotwRequestIsReadInPieces(t *testing.T) {
	big := bigSotwRequest(3000)
	big.Node = &core.Node{Id: "sidecar~10.0.0.1~a.ns~ns.svc.cluster.local"}
	names := newNameTable(0)
	for _, seed := range sotwSeeds(t, big) {
		want, b := seed.req, seed.b
		for _, size := range []int{1, 5, 16 << 10, len(b) + 1} {
			s := requestScan{h: xxhash.New()}
			if !s.pieces(inPieces(b, size)) {
				t.Fatalf("pieces of %d: a well-formed request was left to the whole-message reader", size)
			}
			var got sotwRequest
			if err := decodeSotwRequest(inPieces(b, size), &got); err != nil {
				t.Fatal(err)
			}
			if got.hash != rawListHash(want.ResourceNames) || got.n != len(want.ResourceNames) {
				t.Fatalf("pieces of %d: hash %x of %d names, want %x of %d", size, got.hash, got.n, rawListHash(want.ResourceNames), len(want.ResourceNames))
			}
			list, err := got.names(names)
			if err != nil {
				t.Fatal(err)
			}
			got.req.ResourceNames = list
			if d := cmp.Diff(want, &got.req, protocmp.Transform()); d != "" {
				t.Fatalf("pieces of %d: decodes otherwise than proto's decoder:\n%s", size, d)
			}
		}
	}

	// The request's pieces stay the request's until it is released, though gRPC frees its own
	// reference once the codec returns; a request whose names were read gives them back then.
	b, _ := proto.Marshal(big)
	for _, read := range []bool{false, true} {
		pool := &countingPool{}
		var data mem.BufferSlice
		for len(b) > 0 {
			n := min(16<<10, len(b))
			piece := slices.Clone(b[:n])
			data = append(data, mem.NewBuffer(&piece, pool))
			b = b[n:]
		}
		b, _ = proto.Marshal(big)
		var got sotwRequest
		if err := decodeSotwRequest(data, &got); err != nil {
			t.Fatal(err)
		}
		data.Free() // gRPC's reference, after Unmarshal
		if pool.put != 0 {
			t.Fatalf("%d pieces given back while the request holds them", pool.put)
		}
		if read {
			if _, err := got.names(names); err != nil {
				t.Fatal(err)
			}
		} else {
			got.release()
		}
		if pool.put != len(data) {
			t.Fatalf("names read %v: %d of %d pieces given back", read, pool.put, len(data))
		}
		got.release() // twice is harmless
	}
}

// countingPool counts the buffers given back to it.
type countingPool struct{ put int }

func (p *countingPool) Get(n int) *[]byte { b := make([]byte, n); return &b }
func (p *countingPool) Put(*[]byte)       { p.put++ }

// TestSotwRequestNamesAreReadWhenNeeded: a state-of-the-world request decodes as proto's decoder
// decodes it, its names read when asked for (interned), its hash that of its names, and a name
// that is not UTF-8 an error when read.
func TestSotwRequestNamesAreReadWhenNeeded(t *testing.T) {
	names := newNameTable(0)
	known := names.name(names.acquire(fmt.Sprint("kn", "own")))
	for _, seed := range sotwSeeds(t) {
		want, b := seed.req, seed.b
		var got sotwRequest
		if err := decodeSotwRequest(mem.BufferSlice{mem.SliceBuffer(b)}, &got); err != nil {
			t.Fatal(err)
		}
		if got.hash != rawListHash(want.ResourceNames) || got.n != len(want.ResourceNames) {
			t.Fatalf("hash %x of %d names, want %x of %d", got.hash, got.n, rawListHash(want.ResourceNames), len(want.ResourceNames))
		}
		list, err := got.names(names)
		if err != nil {
			t.Fatal(err)
		}
		got.req.ResourceNames = list
		if d := cmp.Diff(want, &got.req, protocmp.Transform()); d != "" {
			t.Fatalf("decodes otherwise than proto's decoder:\n%s", d)
		}
		for _, n := range list {
			if n == "known" && unsafe.StringData(n) != unsafe.StringData(known) {
				t.Error("a name the table holds is a copy of its own")
			}
		}
	}
	var bad sotwRequest
	if err := decodeSotwRequest(mem.BufferSlice{mem.SliceBuffer([]byte{0x1a, 0x02, 0xff, 0xfe})}, &bad); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.names(names); err == nil {
		t.Fatal("a name that is not UTF-8 was read")
	}
}

// BenchmarkSotwACK decodes the ACK of a state-of-the-world client of ten thousand clusters (700 KB
// of names), in the 16 KiB pieces gRPC receives it in, and applies nothing: what every ACK costs
// the server before the stream tells the list from its hash.
func BenchmarkSotwACK(b *testing.B) {
	raw, err := proto.Marshal(bigSotwRequest(10000))
	if err != nil {
		b.Fatal(err)
	}
	data := inPieces(raw, 16<<10)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		var m sotwRequest
		if err := decodeSotwRequest(data, &m); err != nil || m.n != 10000 {
			b.Fatal(err, m.n)
		}
		m.release()
	}
}

// bigSotwRequest is the ACK of a state-of-the-world client subscribed to n clusters.
func bigSotwRequest(n int) *discovery.DiscoveryRequest {
	req := &discovery.DiscoveryRequest{TypeUrl: tEndpoint.url(), VersionInfo: "1f", ResponseNonce: "2a"}
	for i := range n {
		req.ResourceNames = append(req.ResourceNames, fmt.Sprintf("outbound|%d||svc-%d.ns-%d.svc.cluster.local", 80+i%3, i, i%40))
	}
	return req
}

// sotwSeed is a state-of-the-world request and its encoding.
type sotwSeed struct {
	req *discovery.DiscoveryRequest
	b   []byte
}

// sotwSeeds are the state-of-the-world requests of requestSeeds and extra, encoded.
func sotwSeeds(t *testing.T, extra ...*discovery.DiscoveryRequest) []sotwSeed {
	t.Helper()
	var out []sotwSeed
	for _, m := range requestSeeds() {
		if r, ok := m.(*discovery.DiscoveryRequest); ok {
			extra = append(extra, r)
		}
	}
	for _, r := range extra {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, sotwSeed{req: r, b: b})
	}
	return out
}
