package xds

import (
	"context"
	"errors"
	"io"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

var _ discovery.AggregatedDiscoveryServiceServer = (*Server)(nil)

var errStreamClosed = errors.New("stream closed")

// MaxSubscriptions bounds the names one stream may subscribe to per type.
const MaxSubscriptions = 1 << 17

// maxUnknownPending bounds the answers to unknown types a stream may have queued.
const maxUnknownPending = 16

// variant is how a stream of one xDS variant reads requests and writes responses.
type variant struct {
	delta bool
	recv  func() (request, error)
	send  func(*response, mem.BufferPool) error
	// answer sends the one answer to a request of a type krteds serves no resources of: the
	// resources of a debug type (else none), its nonce and version, and for syncz the control
	// plane.
	answer func(typeURL, nonce string, res []*discovery.Resource, cp *core.ControlPlane) error
}

// StreamAggregatedResources serves a state-of-the-world ADS stream.
func (s *Server) StreamAggregatedResources(stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return s.serve(stream.Context(), variant{
		recv: func() (request, error) {
			// Read with the server's codec, which leaves the names to be read if they are needed.
			m := &sotwRequest{}
			if err := stream.RecvMsg(m); err != nil {
				return request{}, err
			}
			return sotwRequestOf(m), nil
		},
		send: func(r *response, pool mem.BufferPool) error { return stream.SendMsg(encodeSotw(r, pool)) },
		answer: func(typeURL, nonce string, res []*discovery.Resource, cp *core.ControlPlane) error {
			out := &discovery.DiscoveryResponse{TypeUrl: typeURL, Nonce: nonce, VersionInfo: nonce, ControlPlane: cp}
			for _, r := range res {
				out.Resources = append(out.Resources, r.Resource)
			}
			return stream.Send(out)
		},
	})
}

// DeltaAggregatedResources serves a delta (incremental) ADS stream.
func (s *Server) DeltaAggregatedResources(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return s.serve(stream.Context(), variant{
		delta: true,
		recv: func() (request, error) {
			r, err := stream.Recv()
			if err != nil {
				return request{}, err
			}
			return deltaRequestOf(r), nil
		},
		send: func(r *response, pool mem.BufferPool) error { return stream.SendMsg(encodeDelta(r, pool)) },
		answer: func(typeURL, nonce string, res []*discovery.Resource, cp *core.ControlPlane) error {
			return stream.Send(&discovery.DeltaDiscoveryResponse{TypeUrl: typeURL, Nonce: nonce, SystemVersionInfo: nonce, Resources: res, ControlPlane: cp})
		},
	})
}

// serve runs one stream: requests are read and applied on their own goroutine, responses are
// decided and sent on this one, one at a time: a slow client holds at most one response.
func (s *Server) serve(ctx context.Context, v variant) error {
	addr, loopback := "", false
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr, loopback = p.Addr.String(), loopbackEnds(p.Addr, p.LocalAddr)
	}
	if s.closing.Load() {
		return status.Error(codes.Unavailable, "krteds is shutting down: connect to another replica")
	}
	c := newConn(s.newConnID(v.delta), v.delta, addr)
	c.loopback = loopback
	// A stream is authenticated before it holds anything: one that cannot prove an identity on
	// the TLS port is refused at once, as istiod refuses it.
	idn, tlsConn, err := s.authenticate(ctx)
	if tlsConn && err != nil {
		s.refused(c, "", err)
		return status.Error(codes.Unauthenticated, clip(err.Error()))
	}
	c.identity = idn
	if err := s.register(c); err != nil {
		s.refused(c, "", err)
		return err
	}
	defer s.unregister(c)

	errs := make(chan error, 1)
	go func() {
		for {
			req, err := v.recv()
			if err == nil {
				err = s.handle(c, req)
			}
			if err != nil {
				errs <- err
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case <-c.stalled:
			return s.stalled(c)
		case <-c.draining:
			return status.Error(codes.Unavailable, "krteds is shutting down: reconnect")
		case <-c.wake:
		}
		if err := s.flush(ctx, c, v); err != nil {
			if errors.Is(err, errStalled) {
				return s.stalled(c)
			}
			return err
		}
	}
}

// errStalled: the stream's client read nothing of a response for the send timeout.
var errStalled = errors.New("stalled")

// stalled ends a stream whose client stopped reading, and closes its connection: gRPC then drops
// the response flow control held back, and it goes back to the budget.
func (s *Server) stalled(c *conn) error {
	s.metrics.Stalled.Inc()
	s.clientConns.close(c.peer)
	return status.Errorf(codes.DeadlineExceeded, "the client read nothing of a response for %v", s.limits.SendTimeout)
}

// flush sends every response that is due, in type order. Each waits for the previous one of the
// stream to be written, is decided (bounded to Limits.ResponseBytes where its type may be
// split), then waits for its size of the send budget before it is encoded and handed to gRPC.
func (s *Server) flush(ctx context.Context, c *conn, v variant) error {
	c.mu.Lock()
	unknown := c.unknown
	c.unknown = nil
	c.mu.Unlock()
	// Answers to unknown types go last: one proves to a client that everything due before its
	// request has been sent.
	defer func() {
		for _, u := range unknown {
			if err := s.answer(c, u, v); err != nil {
				return
			}
		}
	}()
	for t := range numTypes {
		if err := c.waitWritten(ctx); err != nil {
			return err
		}
		c.mu.Lock()
		r := s.next(c, typ(t))
		c.mu.Unlock()
		if r == nil {
			continue
		}
		n := encodedSize(r, c.delta)
		lane := s.budget.lane(n)
		if err := lane.acquire(ctx, int64(n), c.resuming); err != nil {
			return err
		}
		c.resuming = r.more
		start := time.Now()
		if err := v.send(r, c.handOver(lane, n, s.limits.SendTimeout)); err != nil {
			s.metrics.pushFailed(r.t)
			return err
		}
		s.pushed(r, start)
	}
	return nil
}

// answer sends the one answer to a request of a type krteds serves no resources of: for a debug
// type, its resources and a nonce of the debug answers; for any other type, nothing.
func (s *Server) answer(c *conn, req debugRequest, v variant) error {
	var nonce string
	var cp *core.ControlPlane
	if isDebugType(req.typeURL) {
		nonce = c.nextDebugNonce()
	}
	if req.typeURL == TypeDebugSyncz {
		cp = s.controlPlane
	}
	return v.answer(req.typeURL, nonce, s.debugResources(c, req), cp)
}

// pushed records a response in the metrics.
func (s *Server) pushed(r *response, at time.Time) {
	bytes := 0
	for _, it := range r.items {
		bytes += len(it.res.Body)
		if it.update {
			if it.at != 0 {
				s.metrics.converged(r.t, at.Sub(time.Unix(0, it.at)).Seconds())
			}
		}
	}
	s.metrics.pushed(r.t, bytes, time.Since(at).Seconds())
}

// handle applies one request to the stream: the first identifies its client; a request of a
// type krteds serves is applied to the stream's subscription to the type (subscription.go), any
// other is answered once.
func (s *Server) handle(c *conn, req request) error {
	if err := s.identify(c, req); err != nil {
		return err
	}
	t, known := typeOf(req.typeURL)
	if known && t == tLbEndpoint && !req.delta {
		known = false // glob collections exist only in delta xDS
	}
	if !known {
		s.unknownType(c, req)
		return nil
	}
	c.mu.Lock()
	defer c.kick()
	defer c.mu.Unlock()
	if c.closed {
		return errStreamClosed
	}
	sb := c.types[t]
	first := sb == nil
	if first {
		sb = newSubscription(t, c, s.index, s.versions)
		c.types[t] = sb
	}
	r, err := sb.apply(req, first)
	switch r {
	case replyStale:
		s.metrics.expiredNonce(t)
	case replyNACK:
		s.nacked(c, t, sb)
		if t == tEndpoint {
			s.rejectedLEDS(c, sb)
		}
	}
	return err
}

// unknownType queues the one answer to a request of a type krteds serves no resources of (an
// ACK of a debug answer is not answered).
func (s *Server) unknownType(c *conn, req request) {
	if !isDebugType(req.typeURL) {
		s.metrics.UnknownTypes.Inc()
	}
	if req.nonce != "" && !(isDebugType(req.typeURL) && !c.acksDebugAnswer(req.nonce)) {
		return
	}
	c.mu.Lock()
	if len(c.unknown) < maxUnknownPending {
		dr := debugRequest{typeURL: clip(req.typeURL)}
		if names, err := req.names(s.names); err == nil && len(names) > 0 && len(names[0]) <= maxDebugName {
			dr.name = names[0]
		}
		c.unknown = append(c.unknown, dr)
	}
	c.mu.Unlock()
	c.kick()
}

// nacked counts and logs (rate-limited per stream and across streams) a rejection: the client
// keeps its previous resources, and the rejected versions are not sent again until the content
// changes.
func (s *Server) nacked(c *conn, t typ, sb *subscription) {
	s.metrics.rejected(t)
	now := time.Now()
	if ok, _ := c.logs.allow(now); !ok {
		return
	}
	if ok, held := s.logs.nacks.allow(now); ok {
		s.log.Warn("xDS client rejected a response", zap.String("conn", c.id), zap.String("node", clip(c.proxyID())),
			zap.String("type", t.short()), zap.String("nonce", sb.st.SentNonce), zap.String("error", sb.st.LastError),
			zap.Int("suppressedLogLines", held))
	}
}
