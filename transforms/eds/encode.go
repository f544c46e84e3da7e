package eds

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/policy"
)

// Field numbers of the messages krteds encodes by hand (envoy.config.endpoint.v3 and
// envoy.config.core.v3). Encode writes them in the order the deterministic proto marshaller does
// (TestEncodeEqualsProtoMarshal holds it to that), so the bytes equal proto.Marshal of the
// oracle's message (oracle_test.go).
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

// encoder holds what the endpoints of one CLA share: the encoded metadata entries.
type encoder struct {
	// workloads caches the encoded "istio" metadata entry by what it says (a CLA usually has
	// few: a short list, searched in order, then a map).
	workloads   []workloadEntry
	workloadMap map[workloadKey][]byte
	tls         policy.EndpointTLS
	// hashKey is the service's hash key setting (CLAPlan.HashKey).
	hashKey string
	// tlsModes caches the encoded tlsMode entries of values other than "istio".
	tlsModes map[string][]byte
}

// workloadKey is what the "istio" workload entry says. The pods of a StatefulSet, each with its
// own labels and so its own WorkloadMeta, share one.
type workloadKey struct {
	name, namespace, canonical, revision, cluster string
}

type workloadEntry struct {
	k workloadKey
	b []byte
}

// Encode renders the plan as the protobuf encoding of its ClusterLoadAssignment, without building
// the message: the bytes are those of proto.Marshal of the oracle's message (oracle_test.go) with Deterministic set. Sizes
// are computed first, so that the message is written once into an allocation of its size.
func (p CLAPlan) Encode() []byte {
	enc := encoder{tls: p.TLS, hashKey: p.HashKey}
	n := protowire.SizeTag(fClaClusterName) + protowire.SizeBytes(len(p.ClusterName))
	for _, g := range p.Groups {
		n += protowire.SizeTag(fClaEndpoints) + protowire.SizeBytes(enc.localityGroupSize(g))
	}
	out := make([]byte, 0, n)
	out = appendStringField(out, fClaClusterName, p.ClusterName)
	for _, g := range p.Groups {
		out = protowire.AppendTag(out, fClaEndpoints, protowire.BytesType)
		out = protowire.AppendVarint(out, uint64(enc.localityGroupSize(g)))
		out = enc.localityGroup(out, g)
	}
	return out
}

func localitySize(l collections.Locality) int {
	n := 0
	for num, v := range [...]string{fLocalityRegion: l.Region, fLocalityZone: l.Zone, fLocalitySubZone: l.Subzone} {
		if v != "" {
			n += protowire.SizeTag(protowire.Number(num)) + protowire.SizeBytes(len(v))
		}
	}
	return n
}

// uint32ValueSize is the size of a google.protobuf.UInt32Value field holding v.
func uint32ValueSize(num protowire.Number, v uint64) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(protowire.SizeTag(fUInt32ValueValue)+protowire.SizeVarint(v))
}

func appendUInt32Value(b []byte, num protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(protowire.SizeTag(fUInt32ValueValue)+protowire.SizeVarint(v)))
	b = protowire.AppendTag(b, fUInt32ValueValue, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// localityGroupSize is the encoded size of a LocalityLbEndpoints.
func (e *encoder) localityGroupSize(g CLAGroup) int {
	n := protowire.SizeTag(fLocLocality) + protowire.SizeBytes(localitySize(g.Locality))
	for _, ep := range g.Endpoints {
		n += protowire.SizeTag(fLocLbEndpoints) + protowire.SizeBytes(e.lbEndpointSize(ep))
	}
	n += uint32ValueSize(fLocWeight, g.weight())
	if g.Priority != 0 {
		n += protowire.SizeTag(fLocPriority) + protowire.SizeVarint(uint64(g.Priority))
	}
	return n
}

func (e *encoder) localityGroup(b []byte, g CLAGroup) []byte {
	b = protowire.AppendTag(b, fLocLocality, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(localitySize(g.Locality)))
	if g.Locality.Region != "" {
		b = appendStringField(b, fLocalityRegion, g.Locality.Region)
	}
	if g.Locality.Zone != "" {
		b = appendStringField(b, fLocalityZone, g.Locality.Zone)
	}
	if g.Locality.Subzone != "" {
		b = appendStringField(b, fLocalitySubZone, g.Locality.Subzone)
	}
	for _, ep := range g.Endpoints {
		b = protowire.AppendTag(b, fLocLbEndpoints, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(e.lbEndpointSize(ep)))
		b = e.lbEndpoint(b, ep)
	}
	b = appendUInt32Value(b, fLocWeight, g.weight())
	if g.Priority != 0 {
		b = protowire.AppendTag(b, fLocPriority, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(g.Priority))
	}
	return b
}

// metadata is an endpoint's two filter_metadata entries (the first may be nil) and its hash key
// ("" for none), whose entry envoy.lb comes before them.
func (e *encoder) metadata(ep *collections.Endpoint) (tls, workload []byte, hashKey string) {
	if v := e.tls.Value(ep); v != "" {
		tls = e.tlsModeEntry(v)
	}
	return tls, e.workloadEntry(ep.Meta), HashKeyOf(e.hashKey, ep)
}

// socketSizes are the sizes of an endpoint's SocketAddress, Address and Endpoint messages.
func socketSizes(ep *collections.Endpoint) (sock, addr, endpoint int) {
	// port_value is a oneof member: written even when 0, as the marshaller does.
	sock = protowire.SizeTag(fSocketAddress) + protowire.SizeBytes(len(ep.Address)) +
		protowire.SizeTag(fSocketPortValue) + protowire.SizeVarint(uint64(ep.Port))
	addr = protowire.SizeTag(fAddressSocket) + protowire.SizeBytes(sock)
	endpoint = protowire.SizeTag(fEndpointAddress) + protowire.SizeBytes(addr)
	return sock, addr, endpoint
}

// lbEndpointSize is the encoded size of an LbEndpoint.
func (e *encoder) lbEndpointSize(ep *collections.Endpoint) int {
	n := 0
	if h := healthOf[SentHealth(ep)]; h != 0 {
		n += protowire.SizeTag(fLbHealth) + protowire.SizeVarint(uint64(h))
	}
	tls, workload, hashKey := e.metadata(ep)
	n += protowire.SizeTag(fLbMetadata) + protowire.SizeBytes(len(tls)+len(workload)+hashKeyEntrySize(hashKey))
	n += uint32ValueSize(fLbWeight, uint64(ep.Meta.LBWeight()))
	_, _, endpoint := socketSizes(ep)
	return n + protowire.SizeTag(fLbEndpoint) + protowire.SizeBytes(endpoint)
}

func (e *encoder) lbEndpoint(b []byte, ep *collections.Endpoint) []byte {
	// The deterministic marshaller writes the plain fields in number order (health_status,
	// metadata, load_balancing_weight) and the host_identifier oneof (endpoint) after them.
	if h := healthOf[SentHealth(ep)]; h != 0 {
		b = protowire.AppendTag(b, fLbHealth, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(h))
	}
	// metadata { filter_metadata: {envoy.lb: {hash_key}, envoy.transport_socket_match: {tlsMode},
	// istio: {workload}} }, the entries in key order
	tls, workload, hashKey := e.metadata(ep)
	b = protowire.AppendTag(b, fLbMetadata, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len(tls)+len(workload)+hashKeyEntrySize(hashKey)))
	if hashKey != "" {
		b = appendMetadataEntry(b, hashKeyFilter, hashKeyField, hashKey)
	}
	b = append(append(b, tls...), workload...)
	b = appendUInt32Value(b, fLbWeight, uint64(ep.Meta.LBWeight()))
	// endpoint { address { socket_address { address, port_value } } }
	sock, addr, endpoint := socketSizes(ep)
	b = protowire.AppendTag(b, fLbEndpoint, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(endpoint))
	b = protowire.AppendTag(b, fEndpointAddress, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(addr))
	b = protowire.AppendTag(b, fAddressSocket, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(sock))
	b = appendStringField(b, fSocketAddress, ep.Address)
	b = protowire.AppendTag(b, fSocketPortValue, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(ep.Port))
}

// workloadEntry is the filter_metadata entry "istio": {"workload": "<name>;<ns>;<canonical>;<rev>;<cluster>"}.
func (e *encoder) workloadEntry(m *collections.EndpointMeta) []byte {
	k := workloadKey{m.WorkloadName, m.Namespace, m.CanonicalName, m.CanonicalRevision, m.ClusterID}
	if e.workloadMap != nil {
		if b, ok := e.workloadMap[k]; ok {
			return b
		}
	} else {
		for _, c := range e.workloads {
			if c.k == k {
				return c.b
			}
		}
	}
	b := metadataEntry("istio", "workload", k.name, k.namespace, k.canonical, k.revision, k.cluster)
	switch {
	case e.workloadMap != nil:
		e.workloadMap[k] = b
	case len(e.workloads) < workloadListMax:
		e.workloads = append(e.workloads, workloadEntry{k, b})
	default:
		// Many workloads (each entry is looked up twice per endpoint, for its size and its
		// bytes): a map instead of the scan.
		e.workloadMap = make(map[workloadKey][]byte, 2*workloadListMax)
		for _, c := range e.workloads {
			e.workloadMap[c.k] = c.b
		}
		e.workloadMap[k] = b
	}
	return b
}

// workloadListMax is the most workload entries the encoder scans before it keeps a map.
const workloadListMax = 16

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

// The filter_metadata entry of an endpoint's ring-hash key (gRFC A76, Envoy's ring hash and
// maglev): envoy.lb {hash_key: <key>}.
const (
	hashKeyFilter = "envoy.lb"
	hashKeyField  = "hash_key"
)

// hashKeyEntrySize is the size of the hash key's entry, 0 for no key.
func hashKeyEntrySize(key string) int {
	if key == "" {
		return 0
	}
	_, _, _, n := metadataEntrySizes(hashKeyFilter, hashKeyField, len(key))
	return n
}

// metadataEntrySizes are the sizes of a filter_metadata entry's Value, Struct.fields entry,
// Struct and the whole, for a string value of valueLen bytes.
func metadataEntrySizes(filter, key string, valueLen int) (val, field, st, whole int) {
	val = protowire.SizeTag(fValueString) + protowire.SizeBytes(valueLen)                                                        // google.protobuf.Value
	field = protowire.SizeTag(fMapKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(fMapValue) + protowire.SizeBytes(val) // Struct.fields entry
	st = protowire.SizeTag(fStructFields) + protowire.SizeBytes(field)                                                           // google.protobuf.Struct
	entry := protowire.SizeTag(fMapKey) + protowire.SizeBytes(len(filter)) + protowire.SizeTag(fMapValue) + protowire.SizeBytes(st)
	return val, field, st, protowire.SizeTag(fMetaFilter) + protowire.SizeBytes(entry)
}

// metadataEntry encodes one filter_metadata map entry {filter: Struct{fields: {key: string
// value}}}, the value being the parts joined by ";", in one allocation of its exact size.
func metadataEntry(filter, key string, parts ...string) []byte {
	valueLen := len(parts) - 1
	for _, p := range parts {
		valueLen += len(p)
	}
	_, _, _, n := metadataEntrySizes(filter, key, valueLen)
	return appendMetadataEntry(make([]byte, 0, n), filter, key, parts...)
}

// appendMetadataEntry appends metadataEntry's bytes to out.
func appendMetadataEntry(out []byte, filter, key string, parts ...string) []byte {
	valueLen := len(parts) - 1
	for _, p := range parts {
		valueLen += len(p)
	}
	val, field, st, _ := metadataEntrySizes(filter, key, valueLen)
	entry := protowire.SizeTag(fMapKey) + protowire.SizeBytes(len(filter)) + protowire.SizeTag(fMapValue) + protowire.SizeBytes(st)
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

// healthOf is an endpoint's health_status: UNKNOWN (0, so not written) for an endpoint of
// unknown health, as istiod sends ServiceEntry and WorkloadEntry endpoints and gateways.
// Terminating endpoints are never encoded.
var healthOf = map[collections.HealthStatus]core.HealthStatus{
	collections.Unknown:   core.HealthStatus_UNKNOWN,
	collections.Healthy:   core.HealthStatus_HEALTHY,
	collections.UnHealthy: core.HealthStatus_UNHEALTHY,
	collections.Draining:  core.HealthStatus_DRAINING,
}
