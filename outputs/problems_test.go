package outputs

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// TestProblemFiguresDoNotLogAgain: a CLA over the size limit is reported once; its size
// changing with every change of the service (the figures in the detail) is the same problem,
// not logged or counted again. Another problem of the object is.
func TestProblemFiguresDoNotLogAgain(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	l := NewProblemLog(zap.New(core), prometheus.NewRegistry())
	tooLarge := func(bytes int, subject string) collections.Problem {
		return collections.Problem{Kind: "Service", Object: "ns1/big", Reason: collections.ReasonResourceTooLarge, Subject: subject,
			Detail: "ClusterLoadAssignment " + subject + " is " + string(rune('0'+bytes)) + " MB"}
	}
	set := func(ps ...collections.Problem) *collections.ObjectProblems {
		return &collections.ObjectProblems{Kind: "Service", Object: "ns1/big", Problems: ps}
	}
	var prev *collections.ObjectProblems
	for i := 5; i < 9; i++ {
		cur := set(tooLarge(i, "outbound|80||big.ns1.svc.cluster.local"))
		l.handle(krt.Event[collections.ObjectProblems]{Old: prev, New: cur, Event: 0})
		prev = cur
	}
	if n := logs.FilterMessage("skipped invalid input").Len(); n != 1 {
		t.Fatalf("a CLA growing from 5 to 8 MB logged %d times, want once", n)
	}
	if got := testutil.ToFloat64(l.skipped.WithLabelValues("Service", collections.ReasonResourceTooLarge)); got != 1 {
		t.Fatalf("counted %v times, want once", got)
	}
	// Another port's CLA growing too large is another problem.
	cur := set(tooLarge(8, "outbound|80||big.ns1.svc.cluster.local"), tooLarge(6, "outbound|81||big.ns1.svc.cluster.local"))
	l.handle(krt.Event[collections.ObjectProblems]{Old: prev, New: cur})
	if n := logs.FilterMessage("skipped invalid input").Len(); n != 2 {
		t.Fatalf("a second CLA over the limit: %d lines, want 2", n)
	}
}
