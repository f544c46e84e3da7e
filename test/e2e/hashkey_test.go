package e2e

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	networking "istio.io/api/networking/v1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
)

// hashUsers are the header values the ring-hash tests map to backends.
const hashUsers = 60

// TestGRPCClientKeepsRingHashKeysAcrossARestart: grpc-go's xDS client (v1.85, which reads an
// endpoint's envoy.lb hash_key by default, gRFC A76; GRPC_XDS_ENDPOINT_HASH_KEY_BACKWARD_COMPAT
// unset) hashes each request by its x-user header over a ring hash cluster. echo-2 is restarted
// on a new address: with krteds.io/endpoint-hash-key: pod-name every user it had follows it to
// its new address and no other user moves; without it, the new address takes other places on
// the ring and some user moves.
func TestGRPCClientKeepsRingHashKeysAcrossARestart(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		t.Run(fmt.Sprintf("hash key by Pod name: %v", keyed), func(t *testing.T) {
			before, after := restartUnderRingHash(t, keyed)
			moved := 0
			for u, b := range before {
				want := b
				if b == "127.0.0.3" {
					want = "127.0.0.5" // echo-2, restarted
				}
				if after[u] != want {
					moved++
				}
			}
			onRestarted := 0
			for _, b := range before {
				if b == "127.0.0.3" {
					onRestarted++
				}
			}
			t.Logf("%d of %d users were on echo-2; %d users moved other than to its new address", onRestarted, hashUsers, moved)
			if onRestarted == 0 || onRestarted == hashUsers {
				t.Fatalf("%d of %d users on echo-2: the ring does not spread them", onRestarted, hashUsers)
			}
			if keyed && moved > 0 {
				t.Fatalf("with the hash key, %d users moved: before %v, after %v", moved, before, after)
			}
			if !keyed && moved == 0 {
				t.Fatalf("without the hash key no user moved: the test cannot tell the two apart")
			}
		})
	}
}

// restartUnderRingHash maps every user to a backend, restarts echo-2 on 127.0.0.5 and maps them
// again once no request reaches its old address.
func restartUnderRingHash(t *testing.T, keyed bool) (before, after map[string]string) {
	t.Helper()
	port := startBackends(t, "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
	objs := manifests(t, port)
	if keyed {
		for _, o := range objs {
			if s, ok := o.(interface{ GetName() string }); ok && s.GetName() == "echo" {
				o.(metav1.Object).SetAnnotations(map[string]string{collections.AnnotationEndpointHashKey: collections.HashKeyPodName})
			}
		}
	}
	rule := &networkingclient.DestinationRule{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns},
		Spec: networking.DestinationRule{Host: "echo", TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
			LbPolicy: &networking.LoadBalancerSettings_ConsistentHash{ConsistentHash: &networking.LoadBalancerSettings_ConsistentHashLB{
				HashKey: &networking.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName{HttpHeaderName: "x-user"},
				HashAlgorithm: &networking.LoadBalancerSettings_ConsistentHashLB_RingHash_{
					RingHash: &networking.LoadBalancerSettings_ConsistentHashLB_RingHash{MinimumRingSize: 4096}},
			}}}}}}
	m := startKrteds(t, 80, append(objs, rule)...)
	cc := m.dial("xds:///echo.default.svc.cluster.local:80")
	before = mapUsers(t, cc, func(seen map[string]string) bool { return len(distinct(seen)) == 3 && !hasBackend(seen, "127.0.0.5") })

	m.Static.Apply(fixtures.Pod(ns, "echo-2", "echo", "127.0.0.5", "n1"), false)
	s := echoSlice(port, fixtures.Ready, fixtures.Ready, fixtures.Ready)
	s.Endpoints[1] = discoveryv1.Endpoint{Addresses: []string{"127.0.0.5"}, Conditions: fixtures.Ready, TargetRef: s.Endpoints[1].TargetRef}
	m.updateSlice(s)
	after = mapUsers(t, cc, func(seen map[string]string) bool {
		return !hasBackend(seen, "127.0.0.3") && hasBackend(seen, "127.0.0.5")
	})
	return before, after
}

// mapUsers sends one RPC per user until the users' backends satisfy done twice in a row (the
// same mapping: the client holds one ring).
func mapUsers(t *testing.T, cc *grpc.ClientConn, done func(map[string]string) bool) map[string]string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last map[string]string
	for time.Now().Before(deadline) {
		seen := map[string]string{}
		for u := 0; u < hashUsers; u++ {
			user := fmt.Sprintf("user-%d", u)
			who, err := whoamiAs(cc, user)
			if err != nil {
				who = "error"
			}
			seen[user] = who
		}
		if done(seen) && maps.Equal(seen, last) {
			return seen
		}
		last = seen
	}
	t.Fatalf("timed out mapping the users; last: %v", last)
	return nil
}

func whoamiAs(cc *grpc.ClientConn, user string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-user", user)
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, "/krteds.test.Whoami/Whoami", new(emptypb.Empty), out); err != nil {
		return "", err
	}
	return out.Value, nil
}

func distinct(seen map[string]string) map[string]bool {
	out := map[string]bool{}
	for _, b := range seen {
		out[b] = true
	}
	return out
}

func hasBackend(seen map[string]string, b string) bool { return distinct(seen)[b] }
