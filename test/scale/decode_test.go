package scale

import (
	"fmt"
	"slices"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protowire"
)

// The fields of a ClusterLoadAssignment the fleet reads, down to an endpoint's address and
// health (envoy/config/endpoint/v3 and core/v3).
const (
	fCLAName, fCLAEndpoints          = 1, 2 // ClusterLoadAssignment
	fLocalityLbEndpoints             = 2    // LocalityLbEndpoints.lb_endpoints
	fLbEndpoint, fLbHealth           = 1, 2 // LbEndpoint.endpoint, .health_status
	fEndpointAddress                 = 1    // Endpoint.address
	fAddressSocket, fSocketAddrValue = 1, 2 // Address.socket_address, SocketAddress.address
)

// decodeCLA reads, from a ClusterLoadAssignment's bytes, its cluster name and the IPv4 addresses
// of its endpoints a client sends traffic to (HEALTHY or UNKNOWN), sorted: what healthyOf gives
// of the decoded message, without building it. The fleet's clients share two cores with the
// whole control loop; decoding every CLA in full (its metadata maps go through reflection) was
// most of their CPU when fifty state-of-the-world clients were sent 1 002 CLAs at once.
func decodeCLA(b []byte) (name string, healthy []uint32, err error) {
	err = eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == fCLAName && typ == protowire.BytesType:
			name = string(v)
		case num == fCLAEndpoints && typ == protowire.BytesType:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != fLocalityLbEndpoints || typ != protowire.BytesType {
					return nil
				}
				addr, ok, err := lbEndpoint(v)
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
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error {
		switch {
		case num == fLbHealth && typ == protowire.VarintType:
			health = core.HealthStatus(n)
		case num == fLbEndpoint && typ == protowire.BytesType:
			return nested(v, []protowire.Number{fEndpointAddress, fAddressSocket, fSocketAddrValue}, func(s []byte) { addr = string(s) })
		}
		return nil
	})
	if err != nil || (health != core.HealthStatus_HEALTHY && health != core.HealthStatus_UNKNOWN) {
		return 0, false, err
	}
	ip, ok := ipv4(addr)
	return ip, ok, nil
}

// nested finds the bytes field at path (each step a length-delimited field) and hands it to got.
func nested(b []byte, path []protowire.Number, got func([]byte)) error {
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != path[0] || typ != protowire.BytesType {
			return nil
		}
		if len(path) == 1 {
			got(v)
			return nil
		}
		return nested(v, path[1:], got)
	})
}

// eachField walks a message's fields: v is a length-delimited field's bytes, n a varint's value.
func eachField(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return fmt.Errorf("reading a tag: %w", protowire.ParseError(k))
		}
		b = b[k:]
		var v []byte
		var n uint64
		switch typ {
		case protowire.BytesType:
			v, k = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			n, k = protowire.ConsumeVarint(b)
		default:
			k = protowire.ConsumeFieldValue(num, typ, b)
		}
		if k < 0 {
			return fmt.Errorf("reading field %d: %w", num, protowire.ParseError(k))
		}
		b = b[k:]
		if err := fn(num, typ, v, n); err != nil {
			return err
		}
	}
	return nil
}
