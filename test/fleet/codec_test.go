package fleet

import (
	"sync/atomic"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TestVersionsCodec: the fleet's codec, skipping bodies, decodes a delta response as the proto
// codec does, except for the resources' bodies, and counts its bytes; other messages are the proto
// codec's, and a request a proxy encoded itself is sent as it is.
func TestVersionsCodec(t *testing.T) {
	full := &discovery.DeltaDiscoveryResponse{
		SystemVersionInfo: "sys", TypeUrl: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", Nonce: "7",
		RemovedResources: []string{"gone"},
		ControlPlane:     &core.ControlPlane{Identifier: "krteds"},
		Resources: []*discovery.Resource{
			{Name: "a", Version: "1", Aliases: []string{"x"}, Resource: &anypb.Any{TypeUrl: "t", Value: make([]byte, 70_000)}},
			{Version: "2", Name: "b", Ttl: durationpb.New(5), Resource: &anypb.Any{TypeUrl: "t", Value: []byte{1, 2, 3}}},
			{Name: "c"},
		},
	}
	b, err := proto.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	// Split into several buffers as gRPC hands over a message read from several frames.
	var data mem.BufferSlice
	for len(b) > 0 {
		n := min(len(b), 16384)
		data = append(data, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	var n atomic.Int64
	c := codec{skipBodies: true, n: &n}
	got := &discovery.DeltaDiscoveryResponse{}
	for range 2 { // the second decode reuses the scratch buffers
		got.Reset()
		if err := c.Unmarshal(data, got); err != nil {
			t.Fatal(err)
		}
	}
	want := proto.Clone(full).(*discovery.DeltaDiscoveryResponse)
	for _, r := range want.Resources {
		r.Resource = nil
	}
	if !proto.Equal(got, want) {
		t.Fatalf("decoded %v, want %v", got, want)
	}
	if n.Load() != int64(2*data.Len()) {
		t.Errorf("counted %d bytes of two responses of %d", n.Load(), data.Len())
	}
	// With the bodies, the proto codec's decoding.
	withBodies := &discovery.DeltaDiscoveryResponse{}
	if err := (codec{}).Unmarshal(data, withBodies); err != nil || !proto.Equal(withBodies, full) {
		t.Fatalf("decoded with the bodies: %v", err)
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x12, 0x05, 0x1a})}, &discovery.DeltaDiscoveryResponse{}); err == nil {
		t.Error("a truncated response decoded without an error")
	}
	// Anything else is the proto codec's.
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: "t", ResourceNamesSubscribe: []string{"a"}}
	enc, err := c.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	back := &discovery.DeltaDiscoveryRequest{}
	if err := encoding.GetCodecV2("proto").Unmarshal(enc, back); err != nil || !proto.Equal(back, req) {
		t.Fatalf("request round trip: %v %v", back, err)
	}
	// A state-of-the-world request the proxy encoded: as proto.Marshal would, field order aside.
	enc, err = c.Marshal(sotwRequest(nil, encodeNames([]string{"a", "b"}), "t", "v1", "n1"))
	if err != nil {
		t.Fatal(err)
	}
	sotw := &discovery.DiscoveryRequest{}
	if err := encoding.GetCodecV2("proto").Unmarshal(enc, sotw); err != nil ||
		!proto.Equal(sotw, &discovery.DiscoveryRequest{TypeUrl: "t", VersionInfo: "v1", ResponseNonce: "n1", ResourceNames: []string{"a", "b"}}) {
		t.Fatalf("an encoded request decodes as %v (%v)", sotw, err)
	}
}

// TestSotwResponseReadInPlace: a state-of-the-world response read by the proxies' codec carries
// what proto's decoder reads of it: version, type, nonce and each resource's body, in order.
func TestSotwResponseReadInPlace(t *testing.T) {
	full := &discovery.DiscoveryResponse{VersionInfo: "v7", TypeUrl: "t", Nonce: "n3", Canary: true,
		ControlPlane: &core.ControlPlane{Identifier: "krteds"},
		Resources:    []*anypb.Any{{TypeUrl: "t", Value: []byte("one")}, {TypeUrl: "t"}, {TypeUrl: "t", Value: []byte("three")}}}
	b, err := proto.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	c := codec{n: &atomic.Int64{}}
	var r sotwResponse
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b[:5]), mem.SliceBuffer(b[5:])}, &r); err != nil {
		t.Fatal(err)
	}
	if r.version != "v7" || r.typeURL != "t" || r.nonce != "n3" || len(r.values) != 3 ||
		string(r.values[0]) != "one" || len(r.values[1]) != 0 || string(r.values[2]) != "three" {
		t.Fatalf("read %q %q %q %q", r.version, r.typeURL, r.nonce, r.values)
	}
	if c.n.Load() != int64(len(b)) {
		t.Errorf("counted %d bytes of %d", c.n.Load(), len(b))
	}
	r.release()
	if r.values != nil || r.buf != nil {
		t.Error("a released response still refers to its buffer")
	}
	var bad sotwResponse
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x12, 0x05, 0x12})}, &bad); err == nil {
		t.Error("a truncated response decoded without an error")
	}
}
