package transforms

// The names of what krteds serves: type URLs, cluster names, the keys of projected CLAs, and
// resources versioned by their bytes.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/collections"
)

// Type URLs of the resources krteds serves.
const (
	TypeCLA      = resourcev3.EndpointType
	TypeCluster  = resourcev3.ClusterType
	TypeListener = resourcev3.ListenerType
	TypeRoute    = resourcev3.RouteType
)

// ClusterName is outbound|<port>|<subset>|<hostname>.
func ClusterName(port int32, subset, hostname string) string {
	return "outbound|" + strconv.Itoa(int(port)) + "|" + subset + "|" + hostname
}

// ParseClusterName splits outbound|<port>|<subset>|<hostname> (without allocating).
func ParseClusterName(name string) (port int32, subset, hostname string, ok bool) {
	rest, found := strings.CutPrefix(name, "outbound|")
	if !found {
		return 0, "", "", false
	}
	ps, rest, found := strings.Cut(rest, "|")
	if !found {
		return 0, "", "", false
	}
	subset, hostname, found = strings.Cut(rest, "|")
	if !found || strings.Contains(hostname, "|") {
		return 0, "", "", false
	}
	p, err := strconv.Atoi(ps)
	if err != nil || p < 1 || p > 65535 {
		return 0, "", "", false
	}
	return int32(p), subset, hostname, true
}

// ProjectionKey renders a projected class as a key suffix; "" means the CLA is the same for
// every proxy.
func ProjectionKey(p collections.ProxyClass) string {
	if p == (collections.ProxyClass{}) {
		return ""
	}
	return p.Key()
}

// MaxResourceBytes is the default gRPC receive limit of xDS clients (4 MiB).
const MaxResourceBytes = 4 << 20

// Marshal encodes a resource deterministically and versions it by content.
func Marshal(name, typeURL string, m proto.Message) (*collections.Resource, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("marshalling %s %s: %w", typeURL, name, err)
	}
	return Versioned(name, typeURL, b), nil
}

// Versioned wraps an encoded resource, versioned by a hash of its bytes.
func Versioned(name, typeURL string, body []byte) *collections.Resource {
	return &collections.Resource{Name: name, TypeURL: typeURL, Version: xxhash.Sum64(body), Body: body}
}

// ADSConfigSource is a source of resources over the ADS stream itself (the v3 API): where every
// cluster's endpoints, a listener's routes and a LEDS collection come from.
func ADSConfigSource() *core.ConfigSource {
	return &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}, ResourceApiVersion: core.ApiVersion_V3}
}
