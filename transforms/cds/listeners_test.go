package cds

import (
	"os"
	"testing"

	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3" // the bootstrap's protocol options
	"google.golang.org/protobuf/encoding/protojson"
	"k8s.io/apimachinery/pkg/util/yaml"
)

// TestEnvoyBootstrapValidates loads deploy/envoy-bootstrap.yaml as Envoy does (YAML → JSON →
// protojson, unknown fields rejected) and holds it to go-control-plane's ValidateAll.
func TestEnvoyBootstrapValidates(t *testing.T) {
	raw, err := os.ReadFile("../../deploy/envoy-bootstrap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	js, err := yaml.ToJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrap.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("decoding the bootstrap: %v", err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("ValidateAll: %v", err)
	}
	// It fetches clusters over ADS from the krteds cluster.
	if b.GetDynamicResources().GetCdsConfig().GetAds() == nil || len(b.GetStaticResources().GetClusters()) != 1 ||
		b.GetDynamicResources().GetAdsConfig().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName() != b.GetStaticResources().GetClusters()[0].GetName() {
		t.Errorf("the bootstrap does not fetch CDS over ADS from its static cluster: %v", &b)
	}
}
