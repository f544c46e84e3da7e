package e2e

import (
	"strings"
	"testing"

	networking "istio.io/api/networking/v1"
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
