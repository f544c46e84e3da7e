package rigs

import (
	"fmt"
	"strings"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/collections"
)

// CLAEndpoints lists "address:port@cluster" of a CLA, in order.
func CLAEndpoints(t testing.TB, r *collections.Resource) []string {
	t.Helper()
	if r == nil {
		return nil
	}
	cla := &endpoint.ClusterLoadAssignment{}
	if err := proto.Unmarshal(r.Body, cla); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			wl := e.GetMetadata().GetFilterMetadata()["istio"].GetFields()["workload"].GetStringValue()
			out = append(out, fmt.Sprintf("%s:%d@%s", sa.GetAddress(), sa.GetPortValue(), wl[strings.LastIndex(wl, ";")+1:]))
		}
	}
	return out
}
