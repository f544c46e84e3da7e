package eds

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// UnknownSubset stands for every subset name no DestinationRule defines: the CLA set
// outbound|<port>|*|<host> holds, per proxy class, what istiod sends for such a cluster (no
// subset label filter, the rule's port-level traffic policy, and no TLS mode from the rule). "*"
// is not a valid subset name (istiod's validation wants a DNS-1123 label), so it names no real
// subset.
const UnknownSubset = "*"

// UnknownSubsetKey is the key of the CLA set serving cluster name when no rule defines its
// subset, "" when name has no subset (or is that key itself).
func UnknownSubsetKey(name string) string {
	port, subset, host, ok := transforms.ParseClusterName(name)
	if !ok || subset == "" || subset == UnknownSubset {
		return ""
	}
	return transforms.ClusterName(port, UnknownSubset, host)
}

// RelabelCLA is r, an encoded ClusterLoadAssignment, with its cluster_name set to name, versioned
// by its new content. The bytes after the name are shared with r's encoding rules: a
// deterministic encoding writes cluster_name (field 1) first.
func RelabelCLA(r *collections.Resource, name string) *collections.Resource {
	rest, ok := afterClusterName(r.Body)
	if !ok {
		// Not written by Encode or the deterministic marshaller: re-encode.
		var cla endpoint.ClusterLoadAssignment
		if err := proto.Unmarshal(r.Body, &cla); err != nil {
			return EmptyCLA(name)
		}
		cla.ClusterName = name
		out, err := transforms.Marshal(name, transforms.TypeCLA, &cla)
		if err != nil {
			return EmptyCLA(name)
		}
		out.Endpoints = r.Endpoints
		return out
	}
	body := make([]byte, 0, len(name)+len(rest)+8)
	body = protowire.AppendTag(body, fClaClusterName, protowire.BytesType)
	body = protowire.AppendString(body, name)
	body = append(body, rest...)
	out := transforms.Versioned(name, transforms.TypeCLA, body)
	out.Endpoints = r.Endpoints
	if r.LEDS != nil {
		// The same collections, under the name asked for.
		out.LEDS = &collections.LEDSForm{CLA: RelabelCLA(r.LEDS.CLA, name), Collections: r.LEDS.Collections}
	}
	return out
}

// afterClusterName is what follows a leading cluster_name field.
func afterClusterName(b []byte) ([]byte, bool) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != fClaClusterName || typ != protowire.BytesType {
		return nil, false
	}
	_, m := protowire.ConsumeBytes(b[n:])
	if m < 0 {
		return nil, false
	}
	rest := b[n+m:]
	// A second cluster_name would override the first when decoding.
	if num, _, k := protowire.ConsumeTag(rest); k > 0 && num == fClaClusterName {
		return nil, false
	}
	return rest, true
}

// EmptyCLA is the ClusterLoadAssignment of a cluster without endpoints for a proxy (istiod sends
// one for an unknown cluster, or one the proxy cannot see).
func EmptyCLA(name string) *collections.Resource {
	return transforms.Versioned(name, transforms.TypeCLA, CLAPlan{ClusterName: name}.Encode())
}
