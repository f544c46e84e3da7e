package bench

import (
	"errors"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// versionsCodec is the delta fleet's client codec: a DeltaDiscoveryResponse is decoded without
// its resources' bodies, which the fleet never reads (it keeps each resource's name and version).
// The proxies share the machine's cores with krteds; a real proxy decodes bodies on its own.
// Everything else, requests included, goes through the proto codec.
type versionsCodec struct{}

// Name is the content subtype: the server sees a plain proto codec.
func (versionsCodec) Name() string { return "proto" }

func (versionsCodec) Marshal(v any) (mem.BufferSlice, error) {
	return encoding.GetCodecV2("proto").Marshal(v)
}

// Delta responses in flight at once are decoded in scratch buffers reused across calls.
var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

type scratch struct{ in, out, res []byte }

func (versionsCodec) Unmarshal(data mem.BufferSlice, v any) error {
	resp, ok := v.(*discovery.DeltaDiscoveryResponse)
	if !ok {
		return encoding.GetCodecV2("proto").Unmarshal(data, v)
	}
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	if n := data.Len(); cap(s.in) < n {
		s.in = make([]byte, n)
	} else {
		s.in = s.in[:n]
	}
	data.CopyTo(s.in)
	var err error
	if s.out, s.res, err = withoutBodies(s.out[:0], s.res[:0], s.in); err != nil {
		return err
	}
	return proto.Unmarshal(s.out, resp) // copies what it keeps out of the scratch buffers
}

// Field numbers: DeltaDiscoveryResponse.resources, Resource.resource.
const (
	deltaResponseResources = 2
	resourceBody           = 2
)

var errMalformed = errors.New("malformed DeltaDiscoveryResponse")

// field splits the first field off b: its number, wire type, its whole encoding and the rest.
func field(b []byte) (num protowire.Number, typ protowire.Type, f, rest []byte, err error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, nil, nil, errMalformed
	}
	m := protowire.ConsumeFieldValue(num, typ, b[n:])
	if m < 0 {
		return 0, 0, nil, nil, errMalformed
	}
	return num, typ, b[:n+m], b[n+m:], nil
}

// withoutBodies appends to out the encoded response b with each resource's body field left out;
// res is scratch space for one resource.
func withoutBodies(out, res, b []byte) ([]byte, []byte, error) {
	for len(b) > 0 {
		num, typ, f, rest, err := field(b)
		if err != nil {
			return out, res, err
		}
		b = rest
		if num != deltaResponseResources || typ != protowire.BytesType {
			out = append(out, f...)
			continue
		}
		_, _, n := protowire.ConsumeTag(f)
		r, _ := protowire.ConsumeBytes(f[n:])
		res = res[:0]
		for len(r) > 0 {
			rnum, _, rf, rrest, err := field(r)
			if err != nil {
				return out, res, err
			}
			if rnum != resourceBody {
				res = append(res, rf...)
			}
			r = rrest
		}
		out = protowire.AppendTag(out, deltaResponseResources, protowire.BytesType)
		out = protowire.AppendBytes(out, res)
	}
	return out, res, nil
}
