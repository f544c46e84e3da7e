package serving

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/krteds/krteds/outputs/xds"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

// TestConvergenceMetricMeasuresInputToWire drives known changes, spaced by idle gaps, and holds
// krteds_xds_convergence_seconds to the times measured by the client: one observation per
// change, none longer than the client saw (a start time taken from an earlier change would
// stand out by the gap), and together not far shorter.
func TestConvergenceMetricMeasuresInputToWire(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := serve(t, rigs.NewGraph(t, mesh()...), xds.NewMetrics(reg))
	s := r.Open(sidecar("10.9.0.1", "ns1"))
	_ = s.Request(adsclient.TypeCLA, fooCluster)
	resp := recv(t, s)
	_ = s.Ack(resp, fooCluster)

	const changes = 10
	const gap = 150 * time.Millisecond
	var total, longest time.Duration
	for i := 0; i < changes; i++ {
		// The gap is the test's input: time passes between changes.
		time.Sleep(gap)
		c := fixtures.NotReady
		if i%2 == 1 {
			c = fixtures.Ready
		}
		t0 := time.Now()
		r.In.Apply(fooSlice(fixtures.Ready, c, fixtures.Ready), false)
		resp = recv(t, s)
		d := time.Since(t0)
		total += d
		longest = max(longest, d)
		_ = s.Ack(resp, fooCluster)
	}
	h := histogram(t, reg, "krteds_xds_convergence_seconds", "ClusterLoadAssignment")
	sum := time.Duration(h.GetSampleSum() * float64(time.Second))
	t.Logf("client measured %v in all (longest %v); the histogram has %d observations summing to %v", total, longest, h.GetSampleCount(), sum)
	if h.GetSampleCount() != changes {
		t.Fatalf("%d observations for %d changes", h.GetSampleCount(), changes)
	}
	if sum > total {
		t.Fatalf("the histogram (%v) says changes took longer than the client saw (%v)", sum, total)
	}
	if sum < total/5 {
		t.Fatalf("the histogram (%v) is far below what the client saw (%v)", sum, total)
	}
	if longest < gap {
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() >= gap.Seconds() && b.GetCumulativeCount() != changes {
				t.Fatalf("observations above %v, where every change took at most %v: %v", b.GetUpperBound(), longest, h.GetBucket())
			}
		}
	}
}

func histogram(t *testing.T, reg *prometheus.Registry, name, typ string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typ {
					return m.GetHistogram()
				}
			}
		}
	}
	t.Fatalf("no %s{type=%q}", name, typ)
	return nil
}
