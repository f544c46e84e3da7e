// Package outputs serves krteds' results: the xDS server, the debug HTTP surface, metrics and
// logs.
package outputs

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/krteds/krteds/collections"
)

// ProblemReporter logs each distinct skipped input once, naming the object, and counts it in
// krteds_skipped_objects_total{kind,reason}. A problem reported again by a recomputed transform
// is neither logged nor counted twice. The memory of seen problems is bounded; when it is full it
// is cleared, so a long-lived problem may be logged again.
type ProblemReporter struct {
	log     *zap.Logger
	skipped *prometheus.CounterVec

	mu   sync.Mutex
	seen map[collections.Problem]struct{}
}

const maxSeenProblems = 10000

// NewProblemReporter counts in skipped (krteds_skipped_objects_total, see ProblemLog).
func NewProblemReporter(log *zap.Logger, skipped *prometheus.CounterVec) *ProblemReporter {
	return &ProblemReporter{log: log, skipped: skipped, seen: map[collections.Problem]struct{}{}}
}

// Report implements collections.Reporter.
func (r *ProblemReporter) Report(p collections.Problem) {
	r.mu.Lock()
	if _, ok := r.seen[p]; ok {
		r.mu.Unlock()
		return
	}
	if len(r.seen) >= maxSeenProblems {
		clear(r.seen)
	}
	r.seen[p] = struct{}{}
	r.mu.Unlock()
	r.skipped.WithLabelValues(p.Kind, p.Reason).Inc()
	r.log.Warn("skipped invalid input", zap.String("kind", p.Kind), zap.String("object", p.Object),
		zap.String("reason", p.Reason), zap.String("detail", p.Detail))
}
