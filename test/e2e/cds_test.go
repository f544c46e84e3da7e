package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

// TestGRPCClientTakesDestinationRuleClusters: a real gRPC xDS client accepts (ACKs) the cluster of
// every load-balancing policy a DestinationRule may set, and keeps reaching the backends. The
// policies gRPC cannot apply (RANDOM, PASSTHROUGH, maglev) leave it round robin, as istiod's
// grpcgen does; Envoy's forms of them would be NACKed.
func TestGRPCClientTakesDestinationRuleClusters(t *testing.T) {
	port := startBackends(t, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	m := startKrteds(t, 80, manifests(t, port)...)
	cc := m.dial("xds:///echo.default.svc.cluster.local:80")
	until(t, cc, "all three backends are reached", 30, exactly("127.0.0.2", "127.0.0.3", "127.0.0.4"))

	for _, c := range []struct {
		lb string
		// changes: the gRPC cluster differs from the previous step's.
		changes bool
	}{
		{"{simple: RANDOM}", false},
		{"{simple: LEAST_REQUEST, warmup: {duration: 10s}}", true},
		{"{simple: PASSTHROUGH}", true},
		{"{consistentHash: {useSourceIp: true, maglev: {tableSize: 65537}}}", false},
		{"{consistentHash: {httpHeaderName: x-user, ringHash: {minimumRingSize: 1024}}}", true},
		{"{simple: ROUND_ROBIN, localityLbSetting: {failover: [{from: r1, to: r2}]}}", true},
	} {
		lb := c.lb
		objs, err := rigs.ObjectsOf([]byte(fmt.Sprintf(`
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo, namespace: default}
spec:
  host: echo
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 5, interval: 1s, baseEjectionTime: 10s, maxEjectionPercent: 100}
    loadBalancer: %s
`, lb)))
		if err != nil {
			t.Fatal(err)
		}
		since := time.Now()
		m.Static.Apply(objs[0], false)
		if c.changes {
			waitCDSAcked(t, m, since, lb)
		}
		until(t, cc, "all three backends are reached under "+lb, 30, exactly("127.0.0.2", "127.0.0.3", "127.0.0.4"))
	}
	waitCDSAcked(t, m, time.Time{}, "at the end")
}

// waitCDSAcked waits until the gRPC client has been sent clusters after since and ACKed them,
// and fails on any CDS NACK.
func waitCDSAcked(t *testing.T, m *mesh, since time.Time, what string) {
	t.Helper()
	var nack string
	fixtures.Polling("the server records a client's ACK in its stream's goroutine, which signals nothing").
		Await(t, 20*time.Second, what+": a CDS update acknowledged", func() (bool, string) {
			var seen []string
			for _, c := range m.XDS.Statuses() {
				st, ok := c.Types[adsclient.TypeCluster]
				if !ok {
					continue
				}
				if st.NACKs > 0 {
					nack = st.LastError
					return true, ""
				}
				if st.SentTime.After(since) && st.AckedVersion == st.SentVersion {
					return true, ""
				}
				seen = append(seen, fmt.Sprintf("sent %s at %v, acked %s", st.SentVersion, st.SentTime, st.AckedVersion))
			}
			return false, fmt.Sprint(seen)
		})
	if nack != "" {
		t.Fatalf("%s: the gRPC client rejected the clusters: %s", what, nack)
	}
}
