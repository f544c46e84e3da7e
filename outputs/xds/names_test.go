package xds

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// What a client's names and node make the server hold is bounded in bytes, not only in count:
// a name's length, the names of one stream, the names one caller's streams made the server
// intern, the node's metadata and labels. Past a bound the request is refused, saying which.

// subscribeAs opens a delta stream on cc as node, subscribes to names of endpoints, and returns
// how to close the stream once answered, or how it ended.
func subscribeAs(t *testing.T, cc *grpc.ClientConn, node *core.Node, names []string) (func(), error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A send failing means the server ended the stream: Recv says how.
	_ = s.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: tEndpoint.url(), ResourceNamesSubscribe: names})
	_, err = s.Recv()
	return cancel, err
}

// madeUp is n names of size bytes, distinct by prefix.
func madeUp(prefix string, n, size int) []string {
	out := make([]string, n)
	for i := range out {
		p := fmt.Sprintf("%s-%06d-", prefix, i)
		out[i] = p + strings.Repeat("x", size-len(p))
	}
	return out
}

func dial(t *testing.T, fs *fakeServer) *grpc.ClientConn {
	t.Helper()
	cc, err := adsclient.Dial(fs.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// TestNamesAreBoundedInBytes: a name longer than MaxNameBytes is refused; one stream may hold
// StreamNameBytes of names; the streams of one caller (a connection, on the plaintext port) may
// make the server intern CallerNameBytes of names, while a name another caller holds costs
// nothing; another caller is not affected; the names of streams that ended count no more.
func TestNamesAreBoundedInBytes(t *testing.T) {
	fs := startFake(t, func(o *Options) {
		o.Limits = Limits{StreamRate: -1, StreamNameBytes: 1 << 20, CallerNameBytes: 3 << 20}
	})
	refused := func(what string, err error, code codes.Code, says string) {
		t.Helper()
		if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), says) {
			t.Fatalf("%s: %v, want %v saying %q", what, err, code, says)
		}
	}
	a := dial(t, fs)
	_, err := subscribeAs(t, a, sidecarNode(1).Proto(), []string{strings.Repeat("n", MaxNameBytes+1)})
	refused("a name too long", err, codes.InvalidArgument, "a resource name of 4097 bytes; at most 4096")
	_, err = subscribeAs(t, a, sidecarNode(2).Proto(), madeUp("big", 300, 4000))
	refused("1.2 MB of names on one stream", err, codes.ResourceExhausted, "the stream's names would hold")

	var held []func()
	for i := 0; i < 3; i++ { // 800 KB each: 2.4 MB of the caller's 3 MiB
		s, err := subscribeAs(t, a, sidecarNode(10+i).Proto(), madeUp(fmt.Sprintf("a%d", i), 200, 4000))
		if err != nil {
			t.Fatalf("stream %d of the first caller: %v", i, err)
		}
		held = append(held, s)
	}
	_, err = subscribeAs(t, a, sidecarNode(13).Proto(), madeUp("a3", 200, 4000))
	refused("the first caller's fourth stream", err, codes.ResourceExhausted, "subscribed to first hold")
	b := dial(t, fs)
	if _, err := subscribeAs(t, b, sidecarNode(20).Proto(), madeUp("b0", 200, 4000)); err != nil {
		t.Fatalf("another caller: %v", err)
	}
	if _, err := subscribeAs(t, a, sidecarNode(14).Proto(), madeUp("b0", 200, 4000)); err != nil {
		t.Fatalf("the first caller, names another caller holds: %v", err)
	}
	for _, closeStream := range held {
		closeStream()
	}
	waitStreams(t, fs, 2)
	if _, err := subscribeAs(t, a, sidecarNode(15).Proto(), madeUp("a4", 200, 4000)); err != nil {
		t.Fatalf("the first caller, once its streams ended: %v", err)
	}
}

// TestNodesAreBounded: a node whose metadata is too large, or whose LABELS has too many
// entries, is refused with the reason.
func TestNodesAreBounded(t *testing.T) {
	fs := startFake(t)
	fs.src.set(tEndpoint.url(), "e0")
	labels := map[string]any{}
	for i := 0; i < 2000; i++ {
		labels[fmt.Sprintf("l%d", i)] = "v"
	}
	many := sidecarNode(1).Proto()
	lv, err := structpb.NewValue(labels)
	if err != nil {
		t.Fatal(err)
	}
	many.Metadata.Fields["LABELS"] = lv
	big := sidecarNode(2).Proto()
	big.Metadata.Fields["ANNOTATIONS"] = structpb.NewStringValue(strings.Repeat("a", 300<<10))
	for name, tc := range map[string]struct {
		node *core.Node
		says string
	}{
		"2 000 labels":        {many, "LABELS has 2000 entries; at most 1024"},
		"300 KiB of metadata": {big, "node metadata of"},
	} {
		_, err := subscribeAs(t, dial(t, fs), tc.node, []string{"e0"})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.says) {
			t.Errorf("%s: %v, want InvalidArgument saying %q", name, err, tc.says)
		}
	}
	if _, err := subscribeAs(t, dial(t, fs), sidecarNode(3).Proto(), []string{"e0"}); err != nil {
		t.Fatalf("an ordinary node: %v", err)
	}
}
