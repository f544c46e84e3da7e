package fleet

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// The proxies' one protobuf decoder: the few fields they read of what they receive, walked on
// the wire (a response decoded without its bodies, a CLA's name, its healthy addresses), and the
// state-of-the-world request they encode themselves. The proxies share the machine's cores with
// krteds; decoding every CLA in full (its metadata maps go through reflection) was most of their
// CPU.

// Field numbers (envoy/service/discovery/v3, envoy/config/endpoint/v3 and core/v3).
const (
	// DeltaDiscoveryResponse.resources, Resource.resource.
	deltaResponseResources, resourceBody = 2, 2
	// DiscoveryRequest.
	reqVersion, reqNode, reqNames, reqTypeURL, reqNonce = 1, 2, 3, 4, 5

	fCLAName, fCLAEndpoints          = 1, 2 // ClusterLoadAssignment
	fLocalityLbEndpoints             = 2    // LocalityLbEndpoints.lb_endpoints
	fLbEndpoint, fLbHealth           = 1, 2 // LbEndpoint.endpoint, .health_status
	fEndpointAddress                 = 1    // Endpoint.address
	fAddressSocket, fSocketAddrValue = 1, 2 // Address.socket_address, SocketAddress.address
)

// field is one field of a message: its number and wire type, v a length-delimited field's
// bytes, n a varint's value, raw its whole encoding (tag included).
type field struct {
	num protowire.Number
	typ protowire.Type
	v   []byte
	n   uint64
	raw []byte
}

var errStop = errors.New("stop")

// eachField walks a message's fields; fn returning errStop ends the walk without an error.
func eachField(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		var f field
		var k int
		f.num, f.typ, k = protowire.ConsumeTag(b)
		if k < 0 {
			return fmt.Errorf("reading a tag: %w", protowire.ParseError(k))
		}
		rest := b[k:]
		var m int
		switch f.typ {
		case protowire.BytesType:
			f.v, m = protowire.ConsumeBytes(rest)
		case protowire.VarintType:
			f.n, m = protowire.ConsumeVarint(rest)
		default:
			m = protowire.ConsumeFieldValue(f.num, f.typ, rest)
		}
		if m < 0 {
			return fmt.Errorf("reading field %d: %w", f.num, protowire.ParseError(m))
		}
		f.raw, b = b[:k+m], rest[m:]
		if err := fn(f); err != nil {
			if err == errStop {
				return nil
			}
			return err
		}
	}
	return nil
}

// CLAName reads the cluster name of an encoded ClusterLoadAssignment ("" when it has none or
// is malformed before it).
func CLAName(b []byte) string {
	var name string
	_ = eachField(b, func(f field) error {
		if f.num == fCLAName && f.typ == protowire.BytesType {
			name = string(f.v)
			return errStop
		}
		return nil
	})
	return name
}

// DecodeCLA reads, from a ClusterLoadAssignment's bytes, its cluster name and the IPv4 addresses
// of its endpoints a client sends traffic to (HEALTHY or UNKNOWN), sorted: what HealthyOf gives
// of the decoded message, without building it.
func DecodeCLA(b []byte) (name string, healthy []uint32, err error) {
	err = eachField(b, func(f field) error {
		switch {
		case f.num == fCLAName && f.typ == protowire.BytesType:
			name = string(f.v)
		case f.num == fCLAEndpoints && f.typ == protowire.BytesType:
			return eachField(f.v, func(f field) error {
				if f.num != fLocalityLbEndpoints || f.typ != protowire.BytesType {
					return nil
				}
				addr, ok, err := lbEndpoint(f.v)
				if err == nil && ok {
					healthy = append(healthy, addr)
				}
				return err
			})
		}
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	slices.Sort(healthy)
	return name, slices.Compact(healthy), nil
}

// lbEndpoint is an LbEndpoint's IPv4 address, and whether a client sends it traffic.
func lbEndpoint(b []byte) (uint32, bool, error) {
	var addr string
	health := core.HealthStatus_UNKNOWN
	err := eachField(b, func(f field) error {
		switch {
		case f.num == fLbHealth && f.typ == protowire.VarintType:
			health = core.HealthStatus(f.n)
		case f.num == fLbEndpoint && f.typ == protowire.BytesType:
			return nested(f.v, []protowire.Number{fEndpointAddress, fAddressSocket, fSocketAddrValue}, func(s []byte) { addr = string(s) })
		}
		return nil
	})
	if err != nil || (health != core.HealthStatus_HEALTHY && health != core.HealthStatus_UNKNOWN) {
		return 0, false, err
	}
	ip, ok := IPv4(addr)
	return ip, ok, nil
}

// nested finds the bytes field at path (each step a length-delimited field) and hands it to got.
func nested(b []byte, path []protowire.Number, got func([]byte)) error {
	return eachField(b, func(f field) error {
		if f.num != path[0] || f.typ != protowire.BytesType {
			return nil
		}
		if len(path) == 1 {
			got(f.v)
			return nil
		}
		return nested(f.v, path[1:], got)
	})
}

// HealthyOf is the addresses of a decoded CLA's endpoints a client sends traffic to (HEALTHY, or
// UNKNOWN, which Envoy treats as healthy), sorted: what DecodeCLA reads of its bytes.
func HealthyOf(cla *endpoint.ClusterLoadAssignment) []uint32 {
	var out []uint32
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			if h := e.HealthStatus; h != core.HealthStatus_HEALTHY && h != core.HealthStatus_UNKNOWN {
				continue
			}
			if ip, ok := IPv4(e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()); ok {
				out = append(out, ip)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// IPv4 is an IPv4 address as a number.
func IPv4(s string) (uint32, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return 0, false
	}
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), true
}

// IPString is an IPv4 address IPv4 numbered.
func IPString(a uint32) string {
	return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}).String()
}

var errMalformed = errors.New("malformed DeltaDiscoveryResponse")

// withoutBodies appends to out the encoded delta response b with each resource's body field left
// out; res is scratch space for one resource.
func withoutBodies(out, res, b []byte) ([]byte, []byte, error) {
	err := eachField(b, func(f field) error {
		if f.num != deltaResponseResources || f.typ != protowire.BytesType {
			out = append(out, f.raw...)
			return nil
		}
		res = res[:0]
		if err := eachField(f.v, func(rf field) error {
			if rf.num != resourceBody {
				res = append(res, rf.raw...)
			}
			return nil
		}); err != nil {
			return err
		}
		out = protowire.AppendTag(out, deltaResponseResources, protowire.BytesType)
		out = protowire.AppendBytes(out, res)
		return nil
	})
	if err != nil {
		return out, res, fmt.Errorf("%w: %w", errMalformed, err)
	}
	return out, res, nil
}

// encodedRequest is a DiscoveryRequest a proxy encoded itself: a state-of-the-world proxy repeats
// its whole list of names with every ACK, encodes the list once and sends it as it is, after the
// request's other fields (head).
type encodedRequest struct{ head, names []byte }

// encodeNames is the names' fields of a DiscoveryRequest.
func encodeNames(names []string) []byte {
	var b []byte
	for _, n := range names {
		b = protowire.AppendTag(b, reqNames, protowire.BytesType)
		b = protowire.AppendString(b, n)
	}
	return b
}

// sotwRequest encodes a request of the resources of typeURL named by names (encoded by
// encodeNames, never changed after: the request refers to them), answering a response (version,
// nonce), with node (encoded; nil but on a stream's first request).
func sotwRequest(node, names []byte, typeURL, version, nonce string) *encodedRequest {
	b := make([]byte, 0, len(node)+256)
	if node != nil {
		b = protowire.AppendTag(b, reqNode, protowire.BytesType)
		b = protowire.AppendBytes(b, node)
	}
	for _, f := range []struct {
		num protowire.Number
		v   string
	}{{reqVersion, version}, {reqTypeURL, typeURL}, {reqNonce, nonce}} {
		if f.v != "" {
			b = protowire.AppendTag(b, f.num, protowire.BytesType)
			b = protowire.AppendString(b, f.v)
		}
	}
	return &encodedRequest{head: b, names: names}
}

// Field numbers of DiscoveryResponse and google.protobuf.Any.
const (
	respVersion, respResources, respTypeURL, respNonce = 1, 2, 4, 5
	anyValue                                           = 2
)

var errMalformedSotw = errors.New("malformed DiscoveryResponse")

// sotwResponse is a DiscoveryResponse as a proxy reads it: the fields it answers with, and each
// resource's body, a slice of the message's bytes (buf: scratch, given back by release once the
// holder has read the response and the proxy ACKed it).
type sotwResponse struct {
	version, typeURL, nonce string
	values                  [][]byte
	buf                     *scratch
}

// decode reads the encoded response b (the response's own scratch buffer).
func (r *sotwResponse) decode(b []byte) error {
	err := eachField(b, func(f field) error {
		if f.typ != protowire.BytesType {
			return nil
		}
		switch f.num {
		case respVersion:
			r.version = string(f.v)
		case respTypeURL:
			r.typeURL = string(f.v)
		case respNonce:
			r.nonce = string(f.v)
		case respResources:
			var value []byte
			if err := eachField(f.v, func(af field) error {
				if af.num == anyValue && af.typ == protowire.BytesType {
					value = af.v
				}
				return nil
			}); err != nil {
				return err
			}
			r.values = append(r.values, value)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w: %w", errMalformedSotw, err)
	}
	return nil
}

// release gives back the response's scratch buffer: its bodies are not to be read after.
func (r *sotwResponse) release() {
	if r.buf != nil {
		scratchPool.Put(r.buf)
		r.buf, r.values = nil, nil
	}
}
