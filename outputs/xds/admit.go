package xds

import (
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// admit lets a new stream in at the stream rate: past it, the client is told to retry
// (RESOURCE_EXHAUSTED, which Envoy and gRPC back off from). A delta stream coming back holding
// current versions of what it subscribes to (a proxy reconnecting to a restarted or another
// replica) costs almost nothing to serve and is let in regardless (resumed): only what it holds
// current is exempt, and the stream pays for anything more it subscribes to (pay).
func (s *Server) admit(req request) (resumed bool, err error) {
	if s.streamRate == nil {
		return false, nil
	}
	if s.holdsCurrent(req) {
		s.metrics.Resumed.Inc()
		return true, nil
	}
	if s.streamRate.Allow() {
		return false, nil
	}
	s.metrics.Throttled.Inc()
	return false, status.Error(codes.ResourceExhausted, "more new xDS streams than krteds takes on at once: retry")
}

// holdsCurrent reports whether a delta request subscribes only to what its client holds
// current: of a sample of the names it subscribes to and says it holds, resumeShare have a
// version some proxy is sent now (a name subscribed without a version, or that nothing serves,
// is not current).
func (s *Server) holdsCurrent(req request) bool {
	if !req.delta || len(req.initial) == 0 {
		return false
	}
	checked, current := 0, 0
	check := func(name string) {
		checked++
		if ver, ok := parseVersion(req.initial[name]); ok && s.src.Holds(req.typeURL, name, ver) {
			current++
		}
	}
	for name := range req.initial {
		if checked == resumeSample/2 {
			break
		}
		check(name)
	}
	// The names subscribed to, spread over the list.
	step := max(1, len(req.subscribe)/(resumeSample/2))
	for i := 0; i < len(req.subscribe); i += step {
		if n := req.subscribe[i]; n != "*" {
			check(n)
		}
	}
	return checked > 0 && float64(current) >= resumeShare*float64(checked)
}

// resumeSample is how many of a request's names are checked (half of those it says it holds,
// half of those it subscribes to); resumeShare the share of them that must be current for the
// stream to be let in past the stream rate.
const (
	resumeSample = 256
	resumeShare  = 0.95
)

// pay takes a place of the stream rate for a stream let in as resumed that subscribes to more
// than it holds current: its answers wait until its turn (the delay returned).
func (s *Server) pay() time.Duration {
	if s.streamRate == nil {
		return 0
	}
	s.metrics.Throttled.Inc()
	return s.streamRate.Reserve().Delay()
}

// refused counts and logs (rate-limited across streams) a stream refused: its authentication,
// its node, or a bound.
func (s *Server) refused(st *stream, node string, err error) {
	s.metrics.RejectedNodes.Inc()
	if ok, held := s.logs.refused.allow(time.Now()); ok {
		s.log.Warn("refused xDS client", zap.String("conn", st.id), zap.String("peer", st.peer), zap.String("node", clip(node)),
			zap.String("error", clip(status.Convert(err).Message())), zap.Int("suppressedLogLines", held))
	}
}
