package e2e

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
	typev1beta1 "istio.io/api/type/v1beta1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/test/fixtures"
)

// TestGRPCClientSkipsAPodLabelledDraining: a real gRPC xDS client stops sending to a Pod the
// istio.io/draining label marks, and sends to it again once the label is gone.
func TestGRPCClientSkipsAPodLabelledDraining(t *testing.T) {
	port := startBackends(t, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	m := startKrteds(t, 80, manifests(t, port)...)
	cc := m.dial("xds:///echo.default.svc.cluster.local:80")
	until(t, cc, "all three backends are reached", 30, exactly("127.0.0.2", "127.0.0.3", "127.0.0.4"))

	draining := fixtures.Pod(ns, "echo-2", "echo", "127.0.0.3", "n1")
	draining.Labels["istio.io/draining"] = "true"
	m.Static.Apply(draining, false)
	until(t, cc, "127.0.0.3, draining, is no longer reached", 30, exactly("127.0.0.2", "127.0.0.4"))

	m.Static.Apply(fixtures.Pod(ns, "echo-2", "echo", "127.0.0.3", "n1"), false)
	until(t, cc, "127.0.0.3 is reached again", 30, exactly("127.0.0.2", "127.0.0.3", "127.0.0.4"))
}

// TestGRPCClientSeesOnlyThePortsItsSidecarAdmits: with a Sidecar whose egress listener is bound
// to another port, the client's service is not in its scope and its RPCs fail; bound to the
// service's port, they reach the backends.
func TestGRPCClientSeesOnlyThePortsItsSidecarAdmits(t *testing.T) {
	port := startBackends(t, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	sidecar := func(listenerPort uint32) *networkingclient.Sidecar {
		return &networkingclient.Sidecar{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns},
			Spec: networking.Sidecar{Egress: []*networking.IstioEgressListener{{
				Port:  &networking.SidecarPort{Number: listenerPort, Protocol: "GRPC", Name: "grpc"},
				Hosts: []string{"./*"},
			}}}}
	}
	m := startKrteds(t, 80, append(manifests(t, port), sidecar(81))...)
	cc := m.dial("xds:///echo.default.svc.cluster.local:80")
	until(t, cc, "no RPC reaches a backend: port 80 is outside the Sidecar's scope", 5, func(seen map[string]int) bool {
		for who := range seen {
			if !strings.HasPrefix(who, "error:") {
				return false
			}
		}
		return true
	})
	m.Static.Apply(sidecar(80), false)
	until(t, cc, "all three backends are reached once the listener is bound to port 80", 30, exactly("127.0.0.2", "127.0.0.3", "127.0.0.4"))
}

// TestGRPCClientFollowsADestinationRuleThatSelectsIt: a DestinationRule of the client's namespace
// whose workloadSelector matches the client's Pod applies to it: its failoverPriority on the
// version label keeps the client on the backend of its own version. When the selector stops
// matching, no rule applies and the client spreads over every backend.
func TestGRPCClientFollowsADestinationRuleThatSelectsIt(t *testing.T) {
	port := startBackends(t, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	objs := manifests(t, port)
	for _, o := range objs {
		if p, ok := o.(interface{ GetLabels() map[string]string }); ok && p.GetLabels()["app"] == "echo" {
			p.GetLabels()["version"] = "v2"
		}
	}
	v1 := fixtures.Pod(ns, "echo-1", "echo", "127.0.0.2", "n1")
	v1.Labels["version"] = "v1"
	client := fixtures.Pod(ns, "client", "client", "127.0.0.10", "n1")
	client.Labels["version"] = "v1"
	rule := func(app string) *networkingclient.DestinationRule {
		return &networkingclient.DestinationRule{ObjectMeta: metav1.ObjectMeta{Name: "client-version", Namespace: ns},
			Spec: networking.DestinationRule{Host: "echo", WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": app}},
				TrafficPolicy: &networking.TrafficPolicy{
					OutlierDetection: &networking.OutlierDetection{Consecutive_5XxErrors: wrapperspb.UInt32(5)},
					LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
						FailoverPriority: []string{"version"}}}}}}
	}
	m := startKrteds(t, 80, append(objs, v1, client, rule("client"))...)
	cc := m.dial("xds:///echo.default.svc.cluster.local:80")
	until(t, cc, "only the backend of the client's version is reached", 30, exactly("127.0.0.2"))

	m.Static.Apply(rule("nobody"), false)
	until(t, cc, "every backend is reached once the rule no longer selects the client", 30, exactly("127.0.0.2", "127.0.0.3", "127.0.0.4"))
}
