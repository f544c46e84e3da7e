package xds

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"
	"unsafe"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// The messages the encoders stand for, built as the proto codec would be given them.
func sotwMessage(r *response) *discovery.DiscoveryResponse {
	out := &discovery.DiscoveryResponse{VersionInfo: r.version, TypeUrl: r.typeURL(), Nonce: r.nonce, ControlPlane: controlPlaneOf(r)}
	for _, it := range r.items {
		out.Resources = append(out.Resources, &anypb.Any{TypeUrl: it.res.TypeURL, Value: it.res.Body})
	}
	return out
}

func deltaMessage(r *response) *discovery.DeltaDiscoveryResponse {
	out := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: r.version, TypeUrl: r.typeURL(), Nonce: r.nonce,
		RemovedResources: r.removed, ControlPlane: controlPlaneOf(r)}
	for _, it := range r.items {
		res := &discovery.Resource{Name: it.res.Name, Resource: &anypb.Any{TypeUrl: it.res.TypeURL, Value: it.res.Body}}
		if !r.unversioned {
			res.Version = it.res.VersionString()
		}
		out.Resources = append(out.Resources, res)
	}
	return out
}

func controlPlaneOf(r *response) *core.ControlPlane {
	if len(r.controlPlane) == 0 {
		return nil
	}
	cp := &core.ControlPlane{}
	if err := proto.Unmarshal(r.controlPlane, cp); err != nil {
		panic(err)
	}
	return cp
}

// freeTicket is a granted ticket of a budget of its own, for an encoding a test frees.
func freeTicket() *ticket {
	return newSendBudget(0, 0, NewMetrics(nil)).small.request(0, "test", false, false, nil)
}

// What krteds encodes decodes to the message the proto codec would have encoded, for empty and
// large responses, empty bodies and names, removals, and the answers to debug types; the large
// bodies are referenced, not copied, and the rest is written into pieces from the pool.
func TestWireEncodingDecodesAsTheMessage(t *testing.T) {
	big := bytes.Repeat([]byte{0x0a, 0x03, 'a', 'b', 'c'}, 40000) // a body whose length takes three varint bytes
	res := func(name string, body []byte) *collections.Resource {
		return &collections.Resource{Name: name, TypeURL: tEndpoint.url(), Body: body, Version: uint64(len(name))*7919 + 1}
	}
	cases := map[string]*response{
		"empty":   {t: tEndpoint, version: "v1", nonce: "1"},
		"nothing": {t: tCluster},
		"one":     {t: tEndpoint, version: "abc", nonce: "2", items: []item{{res: res("outbound|80||a.ns.svc.cluster.local", []byte{0x0a, 0x01, 'a'})}}},
		"empty body and name": {t: tListener, version: "x", nonce: "3",
			items: []item{{res: res("", nil)}, {res: res("l", []byte{})}}},
		"large":   {t: tEndpoint, version: "v", nonce: "4", items: []item{{res: res("big", big)}, {res: res("small", big[:5])}}},
		"removed": {t: tEndpoint, version: "v", nonce: "5", removed: []string{"gone", "", "also-gone"}},
	}
	var many response
	many.t, many.version, many.nonce = tEndpoint, "many", "6"
	for i := 0; i < 300; i++ {
		many.items = append(many.items, item{res: res(fmt.Sprintf("c%d", i), big[:5*(i%20+1)])})
	}
	cases["many"] = &many
	// Versions of every hexadecimal length, 0 ("0") and the largest included.
	var versions response
	versions.t, versions.version, versions.nonce = tEndpoint, "vs", "7"
	for _, v := range []uint64{0, 1, 0xf, 0x10, 0xfff, 0x1000, 1 << 63, ^uint64(0)} {
		r := res(fmt.Sprintf("v%x", v), []byte{0x0a, 0x01, 'v'})
		r.Version = v
		versions.items = append(versions.items, item{res: r})
	}
	cases["versions"] = &versions
	cp, _ := proto.Marshal(&core.ControlPlane{Identifier: `{"Component":"krteds"}`})
	cases["a debug answer"] = &response{other: "istio.io/debug/syncz", unversioned: true, version: "debug-1", nonce: "debug-1", controlPlane: cp,
		items: []item{{res: &collections.Resource{Name: "p.ns", TypeURL: "type.googleapis.com/envoy.service.status.v3.ClientConfig", Body: big[:100]}}}}
	cases["an unknown type's answer"] = &response{other: "type.googleapis.com/some.Unknown", unversioned: true}
	for name, r := range cases {
		for _, delta := range []bool{false, true} {
			var w *wireMessage
			var want, got proto.Message
			if delta {
				w, want, got = encodeDelta(r, newReleasingPool(freeTicket())), deltaMessage(r), &discovery.DeltaDiscoveryResponse{}
			} else {
				w, want, got = encodeSotw(r, newReleasingPool(freeTicket())), sotwMessage(r), &discovery.DiscoveryResponse{}
			}
			wire := w.data.Materialize()
			if n := encodedSize(r, delta); n != len(wire) {
				t.Errorf("%s (delta %v): encodedSize says %d bytes, the encoding has %d", name, delta, n, len(wire))
			}
			if err := proto.Unmarshal(wire, got); err != nil || !proto.Equal(got, want) {
				t.Fatalf("%s (delta %v): decodes to %v (%v), want %v", name, delta, got, err, want)
			}
			if marshalled, _ := proto.Marshal(want); len(marshalled) != len(wire) {
				t.Errorf("%s (delta %v): %d bytes, the marshaller writes %d", name, delta, len(wire), len(marshalled))
			}
			// Bodies by reference, in order, in pieces of at most wirePiece bytes; the framing in
			// pieces of the pool's arrays, each its own, of at most wirePiece bytes.
			var bodies [][]byte
			for _, it := range r.items {
				if referenced(it.res.Body) {
					bodies = append(bodies, it.res.Body)
				}
			}
			for _, b := range w.data {
				d := b.ReadOnlyData()
				if len(d) > wirePiece {
					t.Errorf("%s (delta %v): a piece of %d bytes", name, delta, len(d))
				}
				if len(bodies) > 0 && unsafe.SliceData(d) == unsafe.SliceData(bodies[0]) {
					if bodies[0] = bodies[0][len(d):]; len(bodies[0]) == 0 {
						bodies = bodies[1:]
					}
					continue
				}
				if c := cap(d); c < 1<<framingMinShift || c&(c-1) != 0 {
					t.Errorf("%s (delta %v): a framing piece (capacity %d) is not one of the pool's", name, delta, c)
				}
			}
			if len(bodies) != 0 {
				t.Errorf("%s (delta %v): %d bodies were copied", name, delta, len(bodies))
			}
			w.data.Free() // as gRPC does once written: the framing goes back to the pool
		}
	}
}

// Framing buffers are pooled by power-of-two size; larger ones are not kept.
func TestFramingPool(t *testing.T) {
	for _, c := range []struct{ size, tier int }{{0, 0}, {1, 0}, {1024, 0}, {2048, 0}, {2049, 1}, {4096, 1}, {1 << 20, 9}, {1<<20 + 1, -1}} {
		if got := framingTier(c.size); got != c.tier {
			t.Errorf("framingTier(%d) = %d, want %d", c.size, got, c.tier)
		}
		b := framingBuffers.Get(c.size)
		if len(*b) != c.size || (c.tier >= 0 && cap(*b) != 1<<(c.tier+framingMinShift)) {
			t.Errorf("Get(%d): len %d cap %d", c.size, len(*b), cap(*b))
		}
		framingBuffers.Put(b)
	}
	odd := make([]byte, 3000) // not a pool size (a framing that grew): dropped, not handed out again
	framingBuffers.Put(&odd)
	for range 100 {
		if b := framingBuffers.Get(3000); cap(*b) != 4096 {
			t.Fatalf("Get(3000) gave a buffer of capacity %d", cap(*b))
		}
	}
}

// The codec sends wireMessages as they are and everything else through the proto codec.
func TestWireCodec(t *testing.T) {
	c := newWireCodec(nil)
	w := &wireMessage{data: mem.BufferSlice{mem.SliceBuffer("abc")}}
	if out, err := c.Marshal(w); err != nil || string(out.Materialize()) != "abc" {
		t.Fatalf("%q %v", out.Materialize(), err)
	}
	req := &discovery.DeltaDiscoveryRequest{TypeUrl: tEndpoint.url(), ResourceNamesSubscribe: []string{"a"}}
	out, err := c.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var back discovery.DeltaDiscoveryRequest
	if err := c.Unmarshal(out, &back); err != nil || !proto.Equal(&back, req) {
		t.Fatalf("round trip: %v %v", &back, err)
	}
	if c.Unmarshal(out, w) == nil {
		t.Fatal("a wireMessage was decoded")
	}
}

// A codec among the caller's options does not replace krteds' own: responses still reach the
// client.
func TestCallerCodecDoesNotReplaceTheWireCodec(t *testing.T) {
	src := newFakeSource()
	srv := NewServer(src, Options{ClusterID: "Kubernetes"})
	stop := make(chan struct{})
	defer close(stop)
	srv.Start(stop)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGRPCServer(context.Background(), srv, nil, grpc.ForceServerCodecV2(encoding.GetCodecV2("proto")))
	defer gs.Stop()
	go func() { _ = gs.Serve(lis) }()
	cc, err := adsclient.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	src.set(tEndpoint.url(), "c1")
	d, err := adsclient.OpenDelta(context.Background(), cc, sidecarNode(1))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: tEndpoint.url(), ResourceNamesSubscribe: []string{"c1"}}); err != nil {
		t.Fatal(err)
	}
	if r, err := d.Recv(10 * time.Second); err != nil || len(r.Resources) != 1 {
		t.Fatalf("%v, %v", r, err)
	}
}
