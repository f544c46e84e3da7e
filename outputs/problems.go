package outputs

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// maxDetailBytes bounds the detail of a problem in a log line.
const maxDetailBytes = 512

// ProblemLog turns collections of problems into log lines and metrics: a warning and a count in
// krteds_skipped_objects_total{kind,reason} for each problem when it appears (or changes), and
// an info line when an object's problems are gone.
type ProblemLog struct {
	log     *zap.Logger
	skipped *prometheus.CounterVec
}

// NewProblemLog registers its counter with reg (when not nil).
func NewProblemLog(log *zap.Logger, reg prometheus.Registerer) *ProblemLog {
	l := &ProblemLog{
		log: log,
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "krteds_skipped_objects_total",
			Help: "Input objects (or parts of them) skipped because they are invalid, by kind and reason.",
		}, []string{"kind", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(l.skipped)
	}
	return l
}

// Watch logs and counts the problems of c as they come and go.
func (l *ProblemLog) Watch(c krt.Collection[collections.ObjectProblems]) {
	c.RegisterBatch(func(evs []krt.Event[collections.ObjectProblems]) {
		for _, e := range evs {
			l.handle(e)
		}
	}, true)
}

func (l *ProblemLog) handle(e krt.Event[collections.ObjectProblems]) {
	if e.New == nil {
		l.log.Info("input problem resolved", zap.String("kind", e.Old.Kind), zap.String("object", e.Old.Object))
		return
	}
	for _, p := range e.New.Problems {
		if e.Old != nil && containsProblem(e.Old.Problems, p) {
			continue
		}
		l.skipped.WithLabelValues(p.Kind, p.Reason).Inc()
		l.log.Warn("skipped invalid input", zap.String("kind", p.Kind), zap.String("object", p.Object),
			zap.String("reason", p.Reason), zap.String("detail", collections.Truncate(p.Detail, maxDetailBytes)))
	}
}

// containsProblem reports whether ps holds p, or the same problem with other figures in its
// detail (collections.Problem.Same): such a change is not logged or counted again.
func containsProblem(ps []collections.Problem, p collections.Problem) bool {
	return slices.ContainsFunc(ps, p.Same)
}
