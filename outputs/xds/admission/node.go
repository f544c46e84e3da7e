package admission

import (
	"errors"
	"fmt"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/krteds/krteds/collections"
)

// Bounds on a node: what one proxy's metadata may make the server hold. Istio's sidecars send
// a few kilobytes, and a Pod's labels are a few dozen.
const (
	// MaxNodeMetadataBytes bounds the encoded node metadata.
	MaxNodeMetadataBytes = 256 << 10
	// MaxNodeLabels bounds the entries of the node metadata's LABELS.
	MaxNodeLabels = 1024
)

// ProxyFromNode parses an Envoy node as istiod does; a node past the bounds is refused.
func ProxyFromNode(connID string, node *core.Node) (collections.ConnectedProxy, error) {
	if n := proto.Size(node.GetMetadata()); n > MaxNodeMetadataBytes {
		return collections.ConnectedProxy{}, fmt.Errorf("node metadata of %d bytes; at most %d", n, MaxNodeMetadataBytes)
	}
	md := collections.NodeMetadata{}
	fields := node.GetMetadata().GetFields()
	str := func(k string) (string, error) {
		v, ok := fields[k]
		if !ok {
			return "", nil
		}
		sv, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return "", fmt.Errorf("node metadata %s must be a string", k)
		}
		return sv.StringValue, nil
	}
	var err error
	for k, dst := range map[string]*string{
		"NAMESPACE": &md.Namespace, "CLUSTER_ID": &md.ClusterID, "NETWORK": &md.Network,
		"NODE_NAME": &md.NodeName, "GENERATOR": &md.Generator,
	} {
		if *dst, err = str(k); err != nil {
			return collections.ConnectedProxy{}, err
		}
	}
	if v, ok := fields["LABELS"]; ok {
		sv := v.GetStructValue()
		if sv == nil {
			return collections.ConnectedProxy{}, errors.New("node metadata LABELS must be a map of strings")
		}
		if n := len(sv.GetFields()); n > MaxNodeLabels {
			return collections.ConnectedProxy{}, fmt.Errorf("node metadata LABELS has %d entries; at most %d", n, MaxNodeLabels)
		}
		md.Labels = map[string]string{}
		for k, lv := range sv.GetFields() {
			s, ok := lv.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return collections.ConnectedProxy{}, fmt.Errorf("node metadata LABELS[%s] must be a string", clip(k))
			}
			md.Labels[k] = s.StringValue
		}
	}
	loc := collections.Locality{Region: node.GetLocality().GetRegion(), Zone: node.GetLocality().GetZone(), Subzone: node.GetLocality().GetSubZone()}
	return collections.ParseProxy(connID, node.GetId(), md, loc)
}
