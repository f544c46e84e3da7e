// Package e2e runs krteds end to end: real gRPC xDS clients and backends on loopback.
package e2e

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	istioapimeta "istio.io/api/meta/v1alpha1"
	networking "istio.io/api/networking/v1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

// whoami is a one-method gRPC service: it answers with the address the backend listens on.
var whoamiDesc = grpc.ServiceDesc{
	ServiceName: "krteds.test.Whoami",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Whoami",
		Handler: func(srv any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(emptypb.Empty)); err != nil {
				return nil, err
			}
			return wrapperspb.String(srv.(string)), nil
		},
	}},
}

// startBackends listens on the same free port on every IP and serves whoami there.
func startBackends(t *testing.T, ips ...string) int {
	t.Helper()
	for attempt := 0; attempt < 20; attempt++ {
		first, err := net.Listen("tcp", ips[0]+":0")
		if err != nil {
			t.Fatalf("listening on %s: %v", ips[0], err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		lis := []net.Listener{first}
		ok := true
		for _, ip := range ips[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			lis = append(lis, l)
		}
		if !ok {
			for _, l := range lis {
				_ = l.Close()
			}
			continue
		}
		for i, l := range lis {
			s := grpc.NewServer()
			s.RegisterService(&whoamiDesc, ips[i])
			go func() { _ = s.Serve(l) }()
			t.Cleanup(s.Stop)
		}
		return port
	}
	t.Fatal("no port free on every backend address")
	return 0
}

// mesh is krteds in process (the process layer's rig) serving gRPC xDS clients of the test.
type mesh struct {
	*rigs.App
	t    *testing.T
	port int32
}

const ns = "default"

func startKrteds(t *testing.T, port int32, objs ...any) *mesh {
	t.Helper()
	return startKrtedsWith(t, port, app.Options{Objects: objs})
}

// startKrtedsWith starts krteds with o and istiod's default configuration where o has none.
func startKrtedsWith(t *testing.T, port int32, o app.Options) *mesh {
	t.Helper()
	if o.Config.Domain == "" {
		o.Config = collections.DefaultConfig()
	}
	return &mesh{App: rigs.StartApp(t, o), t: t, port: port}
}

func (m *mesh) dial(target string) *grpc.ClientConn {
	m.t.Helper()
	bootstrap := fmt.Sprintf(`{
  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
  "node": {"id": "sidecar~127.0.0.10~client.%s~%s.svc.cluster.local", "metadata": {"GENERATOR": "grpc", "NAMESPACE": %q}}
}`, m.XDSAddr, ns, ns, ns)
	rb, err := xds.NewXDSResolverWithConfigForTesting([]byte(bootstrap))
	if err != nil {
		m.t.Fatal(err)
	}
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		m.t.Fatal(err)
	}
	m.t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func whoami(cc *grpc.ClientConn) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, "/krteds.test.Whoami/Whoami", new(emptypb.Empty), out); err != nil {
		return "", err
	}
	return out.Value, nil
}

// until sends RPCs until cond holds for the backends seen in the last window RPCs. It is no
// wait of its own: what the client does is seen only by using it, so each RPC is the probe (back
// to back, each its own round trip; no tick).
func until(t *testing.T, cc *grpc.ClientConn, what string, window int, cond func(seen map[string]int) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last []string
	for time.Now().Before(deadline) {
		who, err := whoami(cc)
		if err != nil {
			last = append(last, "error:"+err.Error())
		} else {
			last = append(last, who)
		}
		if len(last) > window {
			last = last[1:]
		}
		if len(last) == window {
			seen := map[string]int{}
			for _, w := range last {
				seen[w]++
			}
			if cond(seen) {
				return
			}
		}
	}
	t.Fatalf("timed out waiting until %s; last RPCs reached %v", what, last)
}

func exactly(want ...string) func(map[string]int) bool {
	return func(seen map[string]int) bool {
		got := make([]string, 0, len(seen))
		for k := range seen {
			got = append(got, k)
		}
		sort.Strings(got)
		return slices.Equal(got, want)
	}
}

func manifests(t *testing.T, port int) []any {
	t.Helper()
	return []any{
		fixtures.Namespace(ns, nil, nil),
		fixtures.ZoneNode("n1", "r1", "z1"),
		fixtures.Service(ns, "echo", fixtures.Port{Name: "grpc", Port: 80, Target: int32(port)}),
		fixtures.Pod(ns, "echo-1", "echo", "127.0.0.2", "n1"),
		fixtures.Pod(ns, "echo-2", "echo", "127.0.0.3", "n1"),
		fixtures.Pod(ns, "echo-3", "echo", "127.0.0.4", "n1"),
		echoSlice(port, fixtures.Ready, fixtures.Ready, fixtures.Ready),
	}
}

func echoSlice(port int, c ...discoveryv1.EndpointConditions) *discoveryv1.EndpointSlice {
	var eps []fixtures.Endpoint
	for i, cond := range c {
		eps = append(eps, fixtures.Endpoint{IP: fmt.Sprintf("127.0.0.%d", i+2), Pod: fmt.Sprintf("echo-%d", i+1), Cond: cond})
	}
	return fixtures.Slice(ns, "echo-abc", "echo", []fixtures.SlicePort{{Name: "grpc", Port: int32(port)}}, eps...)
}

func (m *mesh) updateSlice(s *discoveryv1.EndpointSlice) {
	m.Static.Apply(s, false)
}

func TestGRPCClientFollowsEndpointSlices(t *testing.T) {
	port := startBackends(t, "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
	m := startKrteds(t, 80, manifests(t, port)...)
	cc := m.dial("xds:///echo.default.svc.cluster.local:80")

	until(t, cc, "all three backends are reached", 30, exactly("127.0.0.2", "127.0.0.3", "127.0.0.4"))

	// One endpoint turns not ready: no more RPCs reach it.
	m.updateSlice(echoSlice(port, fixtures.Ready, fixtures.NotReady, fixtures.Ready))
	until(t, cc, "127.0.0.3 is no longer reached", 30, exactly("127.0.0.2", "127.0.0.4"))

	// An endpoint is removed from the slice: gone.
	s := echoSlice(port, fixtures.Ready, fixtures.NotReady, fixtures.Ready)
	s.Endpoints = slices.Delete(s.Endpoints, 0, 1)
	m.updateSlice(s)
	until(t, cc, "127.0.0.2 is gone", 30, exactly("127.0.0.4"))

	// An endpoint whose Pod does not exist yet is not served...
	s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"127.0.0.5"}, Conditions: fixtures.Ready,
		TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "echo-4"}})
	m.updateSlice(s)
	until(t, cc, "only 127.0.0.4 while echo-4 is missing", 30, exactly("127.0.0.4"))
	// ...until the Pod is created.
	m.Static.Apply(fixtures.Pod(ns, "echo-4", "echo", "127.0.0.5", "n1"), false)
	until(t, cc, "the late pod's endpoint is reached", 30, exactly("127.0.0.4", "127.0.0.5"))
}

// TestSliceUpdateToFirstRPCLatency measures, over 20 flips, the time from an EndpointSlice
// update that brings an endpoint back to the first RPC that reaches it.
func TestSliceUpdateToFirstRPCLatency(t *testing.T) {
	port := startBackends(t, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	m := startKrteds(t, 80, manifests(t, port)...)
	cc := m.dial("xds:///echo.default.svc.cluster.local:80")
	until(t, cc, "all three backends are reached", 30, exactly("127.0.0.2", "127.0.0.3", "127.0.0.4"))
	var samples []time.Duration
	for i := 0; i < 20; i++ {
		m.updateSlice(echoSlice(port, fixtures.Ready, fixtures.Ready, fixtures.NotReady))
		until(t, cc, "127.0.0.4 is excluded", 15, exactly("127.0.0.2", "127.0.0.3"))
		start := time.Now()
		m.updateSlice(echoSlice(port, fixtures.Ready, fixtures.Ready, fixtures.Ready))
		deadline := start.Add(20 * time.Second)
		for {
			who, err := whoami(cc)
			if err == nil && who == "127.0.0.4" {
				samples = append(samples, time.Since(start))
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("127.0.0.4 never came back")
			}
		}
	}
	slices.Sort(samples)
	t.Logf("EndpointSlice update → first RPC on the new set, 20 flips: median %v, min %v, max %v",
		samples[len(samples)/2], samples[0], samples[len(samples)-1])
}

// TestGRPCClientReachesWorkloadEntries: a real gRPC xDS client reaches VM-style WorkloadEntry
// backends through a ServiceEntry that selects them, and, through a Kubernetes Service, both a
// Pod (from its EndpointSlice) and a WorkloadEntry the Service's selector picks.
func TestGRPCClientReachesWorkloadEntries(t *testing.T) {
	port := startBackends(t, "127.0.0.6", "127.0.0.7", "127.0.0.8", "127.0.0.9")
	vm := func(name, ip, app string, healthy string) *networkingclient.WorkloadEntry {
		we := &networkingclient.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: networking.WorkloadEntry{Address: ip, Labels: map[string]string{"app": app}}}
		if healthy != "" {
			we.Annotations = map[string]string{collections.AnnotationHealthChecksEnabled: "true"}
			we.Status.Conditions = []*istioapimeta.IstioCondition{{Type: collections.ConditionHealthy, Status: healthy}}
		}
		return we
	}
	entry := &networkingclient.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "vms", Namespace: ns},
		Spec: networking.ServiceEntry{Hosts: []string{"vm.example.com"}, Location: networking.ServiceEntry_MESH_INTERNAL,
			Resolution:       networking.ServiceEntry_STATIC,
			Ports:            []*networking.ServicePort{{Number: 80, Name: "grpc", Protocol: "GRPC", TargetPort: uint32(port)}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "vm"}}}}
	mixed := fixtures.Service(ns, "mixed", fixtures.Port{Name: "grpc", Port: 80, Target: int32(port)})
	objs := []any{
		fixtures.Namespace(ns, nil, nil), fixtures.ZoneNode("n1", "r1", "z1"),
		entry, vm("vm-1", "127.0.0.6", "vm", ""), vm("vm-2", "127.0.0.7", "vm", "True"),
		mixed, fixtures.Pod(ns, "mixed-1", "mixed", "127.0.0.8", "n1"), vm("mixed-vm", "127.0.0.9", "mixed", ""),
		fixtures.Slice(ns, "mixed-abc", "mixed", []fixtures.SlicePort{{Name: "grpc", Port: int32(port)}},
			fixtures.Endpoint{IP: "127.0.0.8", Pod: "mixed-1", Cond: fixtures.Ready}),
	}
	m := startKrteds(t, 80, objs...)

	vms := m.dial("xds:///vm.example.com:80")
	until(t, vms, "both WorkloadEntries behind the ServiceEntry are reached", 30, exactly("127.0.0.6", "127.0.0.7"))
	// vm-2's health check fails: it is no longer an endpoint.
	m.Static.Apply(vm("vm-2", "127.0.0.7", "vm", "False"), false)
	until(t, vms, "the unhealthy WorkloadEntry is no longer reached", 30, exactly("127.0.0.6"))

	cc := m.dial("xds:///mixed.default.svc.cluster.local:80")
	until(t, cc, "the Service reaches its Pod and its WorkloadEntry", 30, exactly("127.0.0.8", "127.0.0.9"))
}

// TestUnreachableRemoteClusterHoldsNothingBack: a remote cluster whose API server never answers
// does not delay the local cluster: the gRPC client reaches the local backends as without it.
func TestUnreachableRemoteClusterHoldsNothingBack(t *testing.T) {
	port := startBackends(t, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	dead, err := kube.NewClient(kube.NewClientConfigForRestConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second}), cluster.ID("dead"))
	if err != nil {
		t.Fatal(err)
	}
	m := startKrtedsWith(t, 80, app.Options{Objects: manifests(t, port), Remote: []app.Remote{{ID: "dead", Client: dead}}})
	cc := m.dial("xds:///echo.default.svc.cluster.local:80")
	until(t, cc, "the local backends are reached", 30, exactly("127.0.0.2", "127.0.0.3", "127.0.0.4"))
	if m.Remote.Collection().GetKey("dead") != nil {
		t.Fatal("an unreachable cluster joined")
	}
}

// A gRPC client dials a service by the short names a Kubernetes client would use: <name>.<ns>
// from anywhere, <name> from the service's namespace. krteds serves the listener under the name
// asked for, routing to the service's cluster.
func TestGRPCClientDialsServiceAliases(t *testing.T) {
	port := startBackends(t, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	m := startKrteds(t, 80, manifests(t, port)...)
	for _, target := range []string{"xds:///echo.default:80", "xds:///echo:80"} {
		cc := m.dial(target)
		until(t, cc, target+" reaches all three backends", 30, exactly("127.0.0.2", "127.0.0.3", "127.0.0.4"))
	}
}
