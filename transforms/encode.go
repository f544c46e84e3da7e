package transforms

import (
	"math"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/krteds/krteds/collections"
)

// Field numbers of the messages krteds encodes by hand (envoy.config.endpoint.v3 and
// envoy.config.core.v3). Encode writes them in the order the deterministic proto marshaller does
// (TestEncodeEqualsProtoMarshal holds it to that), so the bytes equal proto.Marshal of Proto().
const (
	fClaClusterName   = 1
	fClaEndpoints     = 2
	fLocLocality      = 1
	fLocLbEndpoints   = 2
	fLocWeight        = 3
	fLocPriority      = 5
	fLocalityRegion   = 1
	fLocalityZone     = 2
	fLocalitySubZone  = 3
	fLbEndpoint       = 1
	fLbHealth         = 2
	fLbMetadata       = 3
	fLbWeight         = 4
	fEndpointAddress  = 1
	fAddressSocket    = 1
	fSocketAddress    = 2
	fSocketPortValue  = 3
	fMetaFilter       = 1
	fMapKey           = 1
	fMapValue         = 2
	fStructFields     = 1
	fValueString      = 3
	fUInt32ValueValue = 1
)

// encoder reuses its scratch buffers across the endpoints of one CLA.
type encoder struct {
	lb, ep, md []byte
	// workload caches the encoded "istio" metadata entry per endpoint metadata.
	workload map[*collections.EndpointMeta][]byte
	tls      TLSMetadata
	// tlsModes caches the encoded tlsMode entries of values other than "istio".
	tlsModes map[string][]byte
}

// Encode renders the plan as the protobuf encoding of its ClusterLoadAssignment, without building
// the message: the bytes are those of proto.Marshal(p.Proto()) with Deterministic set.
func (p CLAPlan) Encode() []byte {
	n := 0
	for _, g := range p.Groups {
		n += len(g.Endpoints)
	}
	out := make([]byte, 0, 32+len(p.ClusterName)+n*140)
	out = protowire.AppendTag(out, fClaClusterName, protowire.BytesType)
	out = protowire.AppendString(out, p.ClusterName)
	enc := encoder{workload: map[*collections.EndpointMeta][]byte{}, tls: p.TLS}
	var group []byte
	for _, g := range p.Groups {
		group = enc.localityGroup(group[:0], g)
		out = protowire.AppendTag(out, fClaEndpoints, protowire.BytesType)
		out = protowire.AppendBytes(out, group)
	}
	return out
}

func (e *encoder) localityGroup(b []byte, g CLAGroup) []byte {
	var loc []byte
	if g.Locality.Region != "" {
		loc = appendStringField(loc, fLocalityRegion, g.Locality.Region)
	}
	if g.Locality.Zone != "" {
		loc = appendStringField(loc, fLocalityZone, g.Locality.Zone)
	}
	if g.Locality.Subzone != "" {
		loc = appendStringField(loc, fLocalitySubZone, g.Locality.Subzone)
	}
	b = protowire.AppendTag(b, fLocLocality, protowire.BytesType)
	b = protowire.AppendBytes(b, loc)
	for _, ep := range g.Endpoints {
		e.lb = e.lbEndpoint(e.lb[:0], ep)
		b = protowire.AppendTag(b, fLocLbEndpoints, protowire.BytesType)
		b = protowire.AppendBytes(b, e.lb)
	}
	// The locality weighs the sum of its endpoints' weights (1 each unless a WorkloadEntry sets
	// one), saturating.
	var weight uint64
	for _, ep := range g.Endpoints {
		weight += uint64(ep.Meta.LBWeight())
	}
	if weight > math.MaxUint32 {
		weight = math.MaxUint32
	}
	b = protowire.AppendTag(b, fLocWeight, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(fUInt32ValueValue)+protowire.SizeVarint(weight)))
	b = protowire.AppendTag(b, fUInt32ValueValue, protowire.VarintType)
	b = protowire.AppendVarint(b, weight)
	if g.Priority != 0 {
		b = protowire.AppendTag(b, fLocPriority, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(g.Priority))
	}
	return b
}

func (e *encoder) lbEndpoint(b []byte, ep collections.Endpoint) []byte {
	// The deterministic marshaller writes the plain fields in number order (health_status,
	// metadata, load_balancing_weight) and the host_identifier oneof (endpoint) after them.
	if h := healthOf[ep.Health]; h != 0 {
		b = protowire.AppendTag(b, fLbHealth, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(h))
	}
	// metadata { filter_metadata: {envoy.transport_socket_match: {tlsMode}, istio: {workload}} }
	md := e.md[:0]
	if v := e.tls.Value(ep.Meta.TLSMode); v != "" {
		md = append(md, e.tlsModeEntry(v)...)
	}
	md = append(md, e.workloadEntry(ep.Meta)...)
	e.md = md
	b = protowire.AppendTag(b, fLbMetadata, protowire.BytesType)
	b = protowire.AppendBytes(b, md)
	b = protowire.AppendTag(b, fLbWeight, protowire.BytesType)
	w := uint64(ep.Meta.LBWeight())
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(fUInt32ValueValue)+protowire.SizeVarint(w)))
	b = protowire.AppendTag(b, fUInt32ValueValue, protowire.VarintType)
	b = protowire.AppendVarint(b, w)
	// endpoint { address { socket_address { address, port_value } } }
	sock := e.ep[:0]
	sock = appendStringField(sock, fSocketAddress, ep.Address)
	if ep.Port != 0 {
		sock = protowire.AppendTag(sock, fSocketPortValue, protowire.VarintType)
		sock = protowire.AppendVarint(sock, uint64(ep.Port))
	}
	e.ep = sock
	addrLen := protowire.SizeTag(fAddressSocket) + protowire.SizeBytes(len(sock))
	endpointLen := protowire.SizeTag(fEndpointAddress) + protowire.SizeBytes(addrLen)
	b = protowire.AppendTag(b, fLbEndpoint, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(endpointLen))
	b = protowire.AppendTag(b, fEndpointAddress, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(addrLen))
	b = protowire.AppendTag(b, fAddressSocket, protowire.BytesType)
	return protowire.AppendBytes(b, sock)
}

// workloadEntry is the filter_metadata entry "istio": {"workload": "<name>;<ns>;<canonical>;<rev>;<cluster>"}.
func (e *encoder) workloadEntry(m *collections.EndpointMeta) []byte {
	if b, ok := e.workload[m]; ok {
		return b
	}
	b := metadataEntry("istio", "workload", m.WorkloadName, m.Namespace, m.CanonicalName, m.CanonicalRevision, m.ClusterID)
	e.workload[m] = b
	return b
}

// tlsModeEntry is the filter_metadata entry "envoy.transport_socket_match": {"tlsMode": v}.
func (e *encoder) tlsModeEntry(v string) []byte {
	if v == collections.TLSModeIstio {
		return istioTLSModeEntry
	}
	b, ok := e.tlsModes[v]
	if !ok {
		if e.tlsModes == nil {
			e.tlsModes = map[string][]byte{}
		}
		b = metadataEntry("envoy.transport_socket_match", "tlsMode", v)
		e.tlsModes[v] = b
	}
	return b
}

var istioTLSModeEntry = metadataEntry("envoy.transport_socket_match", "tlsMode", collections.TLSModeIstio)

// metadataEntry encodes one filter_metadata map entry {filter: Struct{fields: {key: string
// value}}}, the value being the parts joined by ";", in one allocation of its exact size.
func metadataEntry(filter, key string, parts ...string) []byte {
	valueLen := len(parts) - 1
	for _, p := range parts {
		valueLen += len(p)
	}
	val := protowire.SizeTag(fValueString) + protowire.SizeBytes(valueLen)                                                        // google.protobuf.Value
	field := protowire.SizeTag(fMapKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(fMapValue) + protowire.SizeBytes(val) // Struct.fields entry
	st := protowire.SizeTag(fStructFields) + protowire.SizeBytes(field)                                                           // google.protobuf.Struct
	entry := protowire.SizeTag(fMapKey) + protowire.SizeBytes(len(filter)) + protowire.SizeTag(fMapValue) + protowire.SizeBytes(st)
	out := make([]byte, 0, protowire.SizeTag(fMetaFilter)+protowire.SizeBytes(entry))
	out = protowire.AppendTag(out, fMetaFilter, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(entry))
	out = appendStringField(out, fMapKey, filter)
	out = protowire.AppendTag(out, fMapValue, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(st))
	out = protowire.AppendTag(out, fStructFields, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(field))
	out = appendStringField(out, fMapKey, key)
	out = protowire.AppendTag(out, fMapValue, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(val))
	out = protowire.AppendTag(out, fValueString, protowire.BytesType)
	out = protowire.AppendVarint(out, uint64(valueLen))
	for i, p := range parts {
		if i > 0 {
			out = append(out, ';')
		}
		out = append(out, p...)
	}
	return out
}

func appendStringField(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
