package bench

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/examples"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/rigs"
)

// TestServedDigest writes, or checks, a digest of everything krteds serves: for the bundled
// examples (both clusters) and the generated mesh of KRTEDS_BENCH_SIZE, every cluster and CLA
// (and for proxyless gRPC clients every listener) each proxy is sent, by proxy, type and name,
// with a hash of its bytes. A change that must not change what is served is checked with it:
//
//	KRTEDS_DIGEST_WRITE=/tmp/before.txt go test ./test/bench -run '^TestServedDigest$'
//	(the change)
//	KRTEDS_DIGEST_CHECK=/tmp/before.txt go test ./test/bench -run '^TestServedDigest$'
//
// Without either variable it is skipped.
func TestServedDigest(t *testing.T) {
	write, check := os.Getenv("KRTEDS_DIGEST_WRITE"), os.Getenv("KRTEDS_DIGEST_CHECK")
	if write == "" && check == "" {
		t.Skip("KRTEDS_DIGEST_WRITE or KRTEDS_DIGEST_CHECK names the digest file")
	}
	var lines []string
	lines = append(lines, exampleDigest(t)...)
	lines = append(lines, meshDigest(t, CurrentSize())...)
	slices.Sort(lines)
	got := strings.Join(lines, "\n") + "\n"
	if write != "" {
		if err := os.WriteFile(write, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d resources served, digest written to %s", len(lines), write)
		return
	}
	want, err := os.ReadFile(check)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		wantLines := strings.Split(strings.TrimSpace(string(want)), "\n")
		var diff []string
		for _, l := range lines {
			if !slices.Contains(wantLines, l) {
				diff = append(diff, "+ "+l)
			}
		}
		for _, l := range wantLines {
			if !slices.Contains(lines, l) {
				diff = append(diff, "- "+l)
			}
		}
		t.Fatalf("what krteds serves changed (%d resources now, %d before):\n%s", len(lines), len(wantLines), strings.Join(diff[:min(len(diff), 40)], "\n"))
	}
	t.Logf("%d resources served, as in %s", len(lines), check)
}

// examplePod matches a Pod of the example manifests: its name, namespace and IP.
var examplePod = regexp.MustCompile(`(?s)kind: Pod\nmetadata:\n  name: (\S+)\n  namespace: (\S+).*?\n  podIP: (\S+)`)

// exampleDigest serves the bundled examples as `krteds serve --demo` does and digests what each
// of their Pods is sent, as a sidecar and as a proxyless gRPC client.
func exampleDigest(t *testing.T) []string {
	dir := t.TempDir()
	if err := examples.WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	a := rigs.StartApp(t, app.Options{Manifests: filepath.Join(dir, "mesh"), Remote: []app.Remote{{ID: "east", Manifests: filepath.Join(dir, "east")}}})
	cc, err := adsclient.Dial(a.XDSAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	var out []string
	for _, folder := range []string{"mesh", "east"} {
		files, _ := filepath.Glob(filepath.Join(dir, folder, "*.yaml"))
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range examplePod.FindAllStringSubmatch(string(b), -1) {
				pod, ns, ip := m[1], m[2], m[3]
				node := adsclient.Node{ID: fmt.Sprintf("sidecar~%s~%s.%s~%s.svc.cluster.local", ip, pod, ns, ns), Namespace: ns}
				if folder == "east" {
					node.ClusterID = "east"
				}
				out = append(out, digestProxy(t, cc, folder+"/"+pod, node)...)
				node.Generator = "grpc"
				out = append(out, digestProxy(t, cc, folder+"/"+pod+"/grpc", node)...)
			}
		}
	}
	return out
}

// meshDigest serves a generated mesh and digests what each of its proxies is sent.
func meshDigest(t *testing.T, s Size) []string {
	m := Generate(s)
	srv := rigs.Serve(t, rigs.NewGraph(t, m.Objects()...), rigs.ServeOptions{})
	var out []string
	f := &Fleet{Size: s}
	for p := 0; p < s.Proxies; p++ {
		node := adsclient.Node{ID: f.NodeID(p), Namespace: meshNamespace, Locality: s.ProxyLocality(p)}
		out = append(out, digestProxy(t, srv.Conn(), fmt.Sprintf("%s/%d", s.Name, p), node)...)
	}
	return out
}

// digestProxy connects as node and digests every cluster it is sent, their CLAs, and for a gRPC
// client every listener.
func digestProxy(t *testing.T, cc *grpc.ClientConn, who string, node adsclient.Node) []string {
	t.Helper()
	s, err := adsclient.Open(t.Context(), cc, node)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var out []string
	add := func(r *discovery.DiscoveryResponse) {
		for _, a := range r.Resources {
			out = append(out, fmt.Sprintf("%s %s %s %x", who, r.TypeUrl[strings.LastIndexByte(r.TypeUrl, '.')+1:], resourceName(t, a.TypeUrl, a.Value), sha256.Sum256(a.Value)))
		}
	}
	recv := func() *discovery.DiscoveryResponse {
		r, err := s.Recv(30 * time.Second)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		return r
	}
	_ = s.Request(adsclient.TypeCluster)
	cds := recv()
	add(cds)
	clusters, err := adsclient.Decode(cds, func() *cluster.Cluster { return &cluster.Cluster{} })
	if err != nil {
		t.Fatal(err)
	}
	var eds []string
	for _, c := range clusters {
		if c.GetType() == cluster.Cluster_EDS {
			eds = append(eds, c.Name)
		}
	}
	if len(eds) > 0 {
		_ = s.Ack(cds)
		_ = s.Request(adsclient.TypeCLA, eds...)
		for got := 0; got < len(eds); {
			r := recv()
			if r.TypeUrl != adsclient.TypeCLA {
				continue
			}
			add(r)
			got += len(r.Resources)
			_ = s.Ack(r, eds...)
		}
	}
	if node.Generator == "grpc" {
		_ = s.Request(adsclient.TypeListener)
		for {
			if r := recv(); r.TypeUrl == adsclient.TypeListener {
				add(r)
				break
			}
		}
	}
	return out
}

// resourceName is the name a resource's bytes give it.
func resourceName(t *testing.T, typeURL string, b []byte) string {
	t.Helper()
	var m proto.Message
	switch typeURL {
	case adsclient.TypeCluster:
		m = &cluster.Cluster{}
	case adsclient.TypeCLA:
		m = &endpoint.ClusterLoadAssignment{}
	case adsclient.TypeListener:
		m = &listener.Listener{}
	default:
		t.Fatalf("a resource of %s", typeURL)
	}
	if err := proto.Unmarshal(b, m); err != nil {
		t.Fatal(err)
	}
	switch r := m.(type) {
	case *cluster.Cluster:
		return r.Name
	case *endpoint.ClusterLoadAssignment:
		return r.ClusterName
	case *listener.Listener:
		return r.Name
	}
	return ""
}
