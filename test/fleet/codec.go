package fleet

import (
	"sync"
	"sync/atomic"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// codec is the proxies' client codec: it counts the bytes of the responses received, sends a
// request a proxy encoded itself as it is, and (skipBodies) decodes a DeltaDiscoveryResponse
// without its resources' bodies, which a proxy that keeps only names and versions never reads: a
// real proxy decodes bodies on its own cores, these share the machine's with krteds. Everything
// else goes through the proto codec.
type codec struct {
	skipBodies bool
	n          *atomic.Int64
}

// Name is the content subtype: the server sees a plain proto codec.
func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*encodedRequest); ok {
		return mem.BufferSlice{mem.SliceBuffer(r.head), mem.SliceBuffer(r.names)}, nil
	}
	return encoding.GetCodecV2("proto").Marshal(v)
}

// Delta responses in flight at once are decoded in scratch buffers reused across calls.
var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

type scratch struct{ in, out, res []byte }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if c.n != nil {
		c.n.Add(int64(data.Len()))
	}
	if r, ok := v.(*sotwResponse); ok {
		// Read in place: the bodies stay slices of the scratch buffer until the proxy releases it.
		r.buf = scratchPool.Get().(*scratch)
		r.buf.in = grow(r.buf.in, data.Len())
		data.CopyTo(r.buf.in)
		return r.decode(r.buf.in)
	}
	resp, ok := v.(*discovery.DeltaDiscoveryResponse)
	if !ok || !c.skipBodies {
		return encoding.GetCodecV2("proto").Unmarshal(data, v)
	}
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	s.in = grow(s.in, data.Len())
	data.CopyTo(s.in)
	var err error
	if s.out, s.res, err = withoutBodies(s.out[:0], s.res[:0], s.in); err != nil {
		return err
	}
	return proto.Unmarshal(s.out, resp) // copies what it keeps out of the scratch buffers
}

// grow is b with length n, reallocated only if it has not the room.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}
