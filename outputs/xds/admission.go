package xds

import (
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/collections"
)

// Admission: a stream's client is authenticated before it holds anything (stream.go), and on its
// first request identified, authorized for the namespace it claims and let in at the stream rate.

// identify registers the proxy on the stream's first request and tells the source; a malformed
// node, one its identity may not act as, or a stream past the stream rate ends the stream.
func (s *Server) identify(c *conn, req request) error {
	c.mu.Lock()
	known := c.proxy != nil
	c.mu.Unlock()
	if known {
		return nil
	}
	node := req.node
	if node == nil {
		return status.Error(codes.InvalidArgument, "the first request of a stream must carry the node")
	}
	cp, err := ProxyFromNode(c.id, node)
	if err == nil {
		err = s.authorize(c, cp)
	}
	if err == nil {
		err = s.admit(req)
	}
	if err != nil {
		s.refused(c, node.GetId(), err)
		code := status.Code(err)
		if code == codes.Unknown {
			code = codes.InvalidArgument
		}
		return status.Error(code, clip(status.Convert(err).Message()))
	}
	// Connect under the stream's lock, so that a stream closing meanwhile disconnects after it.
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errStreamClosed
	}
	c.proxy = &cp
	c.istioVersion = s.metrics.Istio.versionLabel(node.GetMetadata().GetFields()["ISTIO_VERSION"].GetStringValue())
	s.indexNode(c)
	s.src.Connect(cp)
	// The view is read and set under the stream's lock: a change naming the connection, handled
	// meanwhile, sets the view it read after this one (read outside the lock, an older nil read
	// here could overwrite the view that change set, and nothing would set it again).
	c.setViewLocked(s.src.View(c.id))
	c.mu.Unlock()
	c.kick()
	s.metrics.clients(cp.Type, c.istioVersion, 1)
	if ok, held := s.logs.connects.allow(time.Now()); ok {
		s.log.Info("xDS client connected", zap.String("conn", c.id), zap.String("node", cp.ID), zap.String("peer", c.peer),
			zap.String("namespace", cp.Namespace), zap.String("generator", cp.Generator), zap.Int("suppressedLogLines", held))
	}
	return nil
}

// resumeSample is how many of a delta stream's initial versions are checked; resumeShare the
// share of them that must be current for the stream to be let in past the stream rate.
const (
	resumeSample = 256
	resumeShare  = 0.95
)

// admit lets a new stream in at the stream rate: past it, the client is told to retry
// (RESOURCE_EXHAUSTED, which Envoy and gRPC back off from). A delta stream coming back with
// versions that are current (a proxy reconnecting to a restarted or another replica) costs
// almost nothing to serve and is let in regardless; a sample of its versions decides.
func (s *Server) admit(req request) error {
	if s.streamRate == nil {
		return nil
	}
	if req.delta && len(req.initial) > 0 {
		checked, current := 0, 0
		for name, v := range req.initial {
			if checked == resumeSample {
				break
			}
			checked++
			if ver, ok := parseVersion(v); ok && s.src.Holds(req.typeURL, name, ver) {
				current++
			}
		}
		if float64(current) >= resumeShare*float64(checked) {
			s.metrics.Resumed.Inc()
			return nil
		}
	}
	if s.streamRate.Allow() {
		return nil
	}
	s.metrics.Throttled.Inc()
	return status.Error(codes.ResourceExhausted, "more new xDS streams than krteds takes on at once: retry")
}

// refused counts and logs (rate-limited across streams) a stream refused: its authentication,
// its node, or a bound.
func (s *Server) refused(c *conn, node string, err error) {
	s.metrics.RejectedNodes.Inc()
	if ok, held := s.logs.refused.allow(time.Now()); ok {
		s.log.Warn("refused xDS client", zap.String("conn", c.id), zap.String("peer", c.peer), zap.String("node", clip(node)),
			zap.String("error", clip(status.Convert(err).Message())), zap.Int("suppressedLogLines", held))
	}
}

// authorize checks, on an authenticated (TLS) stream, that the identity is from this trust
// domain and that the namespace the proxy claims is its identity's.
func (s *Server) authorize(c *conn, cp collections.ConnectedProxy) error {
	return s.authorizeIdentity(c.identity, cp)
}

// authorizeIdentity checks that an identity (nil on the plaintext port, trusted by where it
// listens) may act as a proxy.
func (s *Server) authorizeIdentity(idn *Identity, cp collections.ConnectedProxy) error {
	if idn == nil {
		return nil
	}
	if s.trustDomain != "" && idn.TrustDomain != s.trustDomain {
		return status.Errorf(codes.PermissionDenied, "identity %s is not in trust domain %s", idn, s.trustDomain)
	}
	if idn.Namespace != cp.Namespace {
		return status.Errorf(codes.PermissionDenied, "identity %s may not act as a proxy in namespace %s", idn, clip(cp.Namespace))
	}
	return nil
}
