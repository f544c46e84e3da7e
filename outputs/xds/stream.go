package xds

import (
	"context"
	"errors"
	"io"
	"slices"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"go.uber.org/zap"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/collections"
)

var _ discovery.AggregatedDiscoveryServiceServer = (*Server)(nil)

var errStreamClosed = errors.New("stream closed")

// MaxSubscriptions bounds the names one stream may subscribe to per type.
const MaxSubscriptions = 1 << 17

// maxUnknownPending bounds the answers to unknown types a stream may have queued.
const maxUnknownPending = 16

// StreamAggregatedResources serves a state-of-the-world ADS stream.
func (s *Server) StreamAggregatedResources(stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	return s.serve(stream.Context(), false, func() (request, error) {
		// Read with the server's codec, which leaves the names to be read if they are needed.
		m := &sotwRequest{}
		if err := stream.RecvMsg(m); err != nil {
			return request{}, err
		}
		return request{sotw: &m.req, list: m}, nil
	}, func(r *response, pool mem.BufferPool) error {
		return stream.SendMsg(encodeSotw(r, pool))
	}, func(c *conn, req debugRequest) error {
		out := &discovery.DiscoveryResponse{TypeUrl: req.typeURL}
		if isDebugType(req.typeURL) {
			out.Nonce = c.nextDebugNonce()
			out.VersionInfo = out.Nonce
		}
		for _, r := range s.debugResources(c, req) {
			out.Resources = append(out.Resources, r.Resource)
		}
		if req.typeURL == TypeDebugSyncz {
			out.ControlPlane = s.controlPlane
		}
		return stream.Send(out)
	})
}

// DeltaAggregatedResources serves a delta (incremental) ADS stream.
func (s *Server) DeltaAggregatedResources(stream discovery.AggregatedDiscoveryService_DeltaAggregatedResourcesServer) error {
	return s.serve(stream.Context(), true, func() (request, error) {
		r, err := stream.Recv()
		return request{delta: r}, err
	}, func(r *response, pool mem.BufferPool) error {
		return stream.SendMsg(encodeDelta(r, pool))
	}, func(c *conn, req debugRequest) error {
		out := &discovery.DeltaDiscoveryResponse{TypeUrl: req.typeURL, Resources: s.debugResources(c, req)}
		if isDebugType(req.typeURL) {
			out.Nonce = c.nextDebugNonce()
			out.SystemVersionInfo = out.Nonce
		}
		if req.typeURL == TypeDebugSyncz {
			out.ControlPlane = s.controlPlane
		}
		return stream.Send(out)
	})
}

// request is one request of either protocol. A state-of-the-world request's names are read
// from list when needed.
type request struct {
	sotw  *discovery.DiscoveryRequest
	list  *sotwRequest
	delta *discovery.DeltaDiscoveryRequest
}

func (r request) node() *core.Node {
	if r.sotw != nil {
		return r.sotw.GetNode()
	}
	return r.delta.GetNode()
}

func (r request) typeURL() string {
	if r.sotw != nil {
		return r.sotw.GetTypeUrl()
	}
	return r.delta.GetTypeUrl()
}

func (r request) nonce() string {
	if r.sotw != nil {
		return r.sotw.GetResponseNonce()
	}
	return r.delta.GetResponseNonce()
}

// names are the resource names a request subscribes to.
func (r request) names(table *nameTable) ([]string, error) {
	if r.list != nil {
		return r.list.names(table)
	}
	if r.sotw != nil {
		return r.sotw.GetResourceNames(), nil
	}
	return r.delta.GetResourceNamesSubscribe(), nil
}

func (r request) errorDetail() *rpcstatus.Status {
	if r.sotw != nil {
		return r.sotw.GetErrorDetail()
	}
	return r.delta.GetErrorDetail()
}

// serve runs one stream: requests are read and applied on their own goroutine, responses are
// decided and sent on this one, one at a time: a slow client holds at most one response.
func (s *Server) serve(ctx context.Context, delta bool, recv func() (request, error), send func(*response, mem.BufferPool) error, sendEmpty func(*conn, debugRequest) error) error {
	addr, loopback := "", false
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr, loopback = p.Addr.String(), loopbackEnds(p.Addr, p.LocalAddr)
	}
	if s.closing.Load() {
		return status.Error(codes.Unavailable, "krteds is shutting down: connect to another replica")
	}
	c := newConn(s.newConnID(delta), delta, addr)
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
			req, err := recv()
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
		if err := s.flush(ctx, c, send, sendEmpty); err != nil {
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
func (s *Server) flush(ctx context.Context, c *conn, send func(*response, mem.BufferPool) error, sendEmpty func(*conn, debugRequest) error) error {
	c.mu.Lock()
	unknown := c.unknown
	c.unknown = nil
	c.mu.Unlock()
	// Answers to unknown types go last: one proves to a client that everything due before its
	// request has been sent.
	defer func() {
		for _, u := range unknown {
			if err := sendEmpty(c, u); err != nil {
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
		if err := send(r, c.handOver(lane, n, s.limits.SendTimeout)); err != nil {
			s.metrics.pushFailed(r.t)
			return err
		}
		s.pushed(r, start)
	}
	return nil
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

// handle applies one request to the stream's state.
func (s *Server) handle(c *conn, req request) error {
	if err := s.identify(c, req); err != nil {
		return err
	}
	t, known := typeOf(req.typeURL())
	if known && t == tLbEndpoint && req.sotw != nil {
		known = false // glob collections exist only in delta xDS
	}
	if !known {
		if !isDebugType(req.typeURL()) {
			s.metrics.UnknownTypes.Inc()
		}
		if req.nonce() == "" || (isDebugType(req.typeURL()) && !c.acksDebugAnswer(req.nonce())) {
			c.mu.Lock()
			if len(c.unknown) < maxUnknownPending {
				dr := debugRequest{typeURL: clip(req.typeURL())}
				if names, err := req.names(s.names); err == nil && len(names) > 0 && len(names[0]) <= maxDebugName {
					dr.name = names[0]
				}
				c.unknown = append(c.unknown, dr)
			}
			c.mu.Unlock()
			c.kick()
		}
		return nil
	}
	c.mu.Lock()
	defer c.kick()
	defer c.mu.Unlock()
	if c.closed {
		return errStreamClosed
	}
	st := c.types[t]
	first := st == nil
	if first {
		st = &typeState{force: true, subs: newSubSet(s.versions)}
		c.types[t] = st
	}
	// The first request of a type on a stream is a new subscription whatever nonce it carries,
	// as istiod's shouldRespond takes it: an Envoy before 1.29 reconnecting sends the previous
	// stream's nonce and version with it (envoyproxy/envoy#30155).
	nonce := req.nonce()
	current := !first && nonce != "" && nonce == st.st.SentNonce
	if nonce != "" && !current && !first {
		s.metrics.expiredNonce(t)
		if req.sotw != nil {
			// A state-of-the-world request answering an older response is ignored: the client
			// will answer the newest one with its full subscription.
			return nil
		}
	}
	if current {
		st.inflight = false
		if e := req.errorDetail(); e != nil {
			s.nack(c, t, st, e)
			if t == tEndpoint {
				s.rejectedLEDS(c, st)
			}
		} else {
			st.st.AckedNonce, st.st.AckedVersion, st.st.LastError = st.st.SentNonce, st.st.SentVersion, ""
		}
	}
	defer st.subs.compact()
	if req.sotw != nil {
		if err := s.subscribeSotw(c, t, st, first, req); err != nil {
			return err
		}
		if t == tEndpoint && st.forceNext {
			st.force, st.forceNext = true, false
		}
		return nil
	}
	return s.subscribeDelta(c, t, st, first, req.delta)
}

// nack records a rejection (the client keeps its previous resources; the rejected versions are
// not sent again until the content changes).
func (s *Server) nack(c *conn, t typ, st *typeState, e *rpcstatus.Status) {
	st.st.NACKs++
	st.st.LastError = clip(e.GetMessage())
	s.metrics.rejected(t)
	now := time.Now()
	if ok, _ := c.logs.allow(now); !ok {
		return
	}
	if ok, held := s.logs.nacks.allow(now); ok {
		s.log.Warn("xDS client rejected a response", zap.String("conn", c.id), zap.String("node", clip(c.proxyID())),
			zap.String("type", t.short()), zap.String("nonce", st.st.SentNonce), zap.String("error", st.st.LastError),
			zap.Int("suppressedLogLines", held))
	}
}

func (c *conn) proxyID() string {
	if c.proxy == nil {
		return ""
	}
	return c.proxy.ID
}

// subscribeSotw makes the subscription the request's list (c.mu held).
func (s *Server) subscribeSotw(c *conn, t typ, st *typeState, first bool, req request) error {
	// Every ACK repeats the whole list: the list of the previous request again changes nothing,
	// and is told by its hash without reading its names.
	var h uint64
	if req.list != nil {
		h = req.list.hash
		if req.list.n > MaxSubscriptions {
			return status.Errorf(codes.InvalidArgument, "%d %s names in one request; at most %d", req.list.n, t.short(), MaxSubscriptions)
		}
	}
	if req.list != nil && !first && st.listed && h == st.listHash {
		return nil
	}
	names, err := req.names(s.names)
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "%s request: %v", t.short(), err)
	}
	if len(names) > MaxSubscriptions {
		return status.Errorf(codes.InvalidArgument, "%d %s names in one request; at most %d", len(names), t.short(), MaxSubscriptions)
	}
	if req.list == nil {
		h = rawListHash(names)
	}
	st.listed, st.listHash = true, h
	wildcard := (first && len(names) == 0 && t.legacyWildcard()) || slices.Contains(names, "*") || (st.wildcard && len(names) == 0)
	if wildcard != st.wildcard {
		st.wildcard = wildcard
		st.dirtyAll = true
		s.setWildcard(c, t, wildcard)
		if !wildcard {
			st.subs.each(func(id nameID, sb sub) {
				if !sb.explicit {
					s.drop(c, t, st, id)
				}
			})
		}
	}
	want := make(map[nameID]struct{}, len(names))
	var added []string
	for _, n := range names {
		if n == "*" {
			continue
		}
		if id, ok := s.names.lookup(n); ok {
			if sb, held := st.subs.get(id); held && sb.explicit {
				want[id] = struct{}{}
				continue
			}
		}
		added = append(added, n)
	}
	for _, id := range s.addAll(c, t, st, added) {
		want[id] = struct{}{}
	}
	st.subs.each(func(id nameID, sb sub) {
		if _, ok := want[id]; !ok && sb.explicit {
			s.release(c, t, st, id, sb)
		}
	})
	return nil
}

// release ends a name's explicit subscription (c.mu held): under a wildcard the name stays,
// held through it; otherwise it is dropped.
func (s *Server) release(c *conn, t typ, st *typeState, id nameID, sb sub) {
	if st.wildcard {
		sb.explicit = false
		st.subs.set(id, sb)
		return
	}
	s.drop(c, t, st, id)
}

// subscribeDelta applies a delta request's subscription changes (c.mu held).
func (s *Server) subscribeDelta(c *conn, t typ, st *typeState, first bool, req *discovery.DeltaDiscoveryRequest) error {
	subs, unsubs := req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe()
	if len(subs)+st.subs.len() > MaxSubscriptions {
		return status.Errorf(codes.InvalidArgument, "more than %d %s names on one stream", MaxSubscriptions, t.short())
	}
	if first {
		if (len(subs) == 0 && t.legacyWildcard()) || slices.Contains(subs, "*") {
			st.wildcard = true
			s.setWildcard(c, t, true)
		}
		if iv := req.GetInitialResourceVersions(); len(iv) > 0 {
			names := make([]string, 0, min(len(iv), MaxSubscriptions))
			for n := range iv {
				if len(names) == MaxSubscriptions {
					break
				}
				names = append(names, n)
			}
			ids := s.names.acquireAll(names)
			s.mu.Lock()
			for _, id := range ids {
				s.indexLocked(t, id, c)
			}
			s.mu.Unlock()
			for i, id := range ids {
				ver, _ := parseVersion(iv[names[i]])
				st.subs.set(id, sub{version: ver, explicit: !st.wildcard})
			}
		}
	} else if slices.Contains(subs, "*") && !st.wildcard {
		st.wildcard = true
		st.dirtyAll = true
		s.setWildcard(c, t, true)
	}
	if len(subs) > 0 {
		s.addAll(c, t, st, slices.DeleteFunc(slices.Clone(subs), func(n string) bool { return n == "*" }))
	}
	for _, n := range unsubs {
		if n == "*" {
			if st.wildcard {
				st.wildcard = false
				s.setWildcard(c, t, false)
				st.subs.each(func(id nameID, sb sub) {
					if !sb.explicit {
						s.drop(c, t, st, id)
					}
				})
			}
			continue
		}
		if id, ok := s.names.lookup(n); ok {
			if sb, held := st.subs.get(id); held {
				if t == tLbEndpoint && sb.explicit {
					s.dropCollection(st, id)
				}
				s.release(c, t, st, id, sb)
			}
		}
	}
	return nil
}

// addAll subscribes the stream to names explicitly and marks them to be looked at (c.mu held),
// interning and indexing them under one lock each. The index is updated before the state, so no
// change of a name can be missed.
func (s *Server) addAll(c *conn, t typ, st *typeState, names []string) []nameID {
	ids := s.names.acquireAll(names)
	var fresh []nameID
	seen := make(map[nameID]struct{}, len(ids))
	for _, id := range ids {
		if _, dup := seen[id]; dup {
			s.names.release(id) // named twice in the request
			continue
		}
		seen[id] = struct{}{}
		if sb, held := st.subs.get(id); held {
			s.names.release(id)
			sb.explicit = true
			st.subs.set(id, sb)
			continue
		}
		fresh = append(fresh, id)
	}
	if len(fresh) > 0 {
		s.mu.Lock()
		for _, id := range fresh {
			s.indexLocked(t, id, c)
		}
		s.mu.Unlock()
		st.subs.addAll(fresh, sub{explicit: true})
	}
	if t.splittable(c.delta) {
		// Swept (4 bytes a name) rather than marked (a map entry each): a first subscription
		// of every cluster of a large mesh, held until its last part is sent, by every stream
		// of a herd.
		for id := range seen {
			st.sweep = append(st.sweep, id)
		}
		return ids
	}
	if st.dirty == nil {
		st.dirty = make(map[nameID]int64, len(seen))
	}
	for id := range seen {
		if _, marked := st.dirty[id]; !marked {
			st.dirty[id] = 0
		}
	}
	return ids
}

func (s *Server) setWildcard(c *conn, t typ, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.wildcard[t][c] = struct{}{}
	} else {
		delete(s.wildcard[t], c)
	}
}

func parseVersion(v string) (uint64, bool) {
	var n uint64
	if v == "" || len(v) > 16 {
		return 0, false
	}
	for _, ch := range []byte(v) {
		var d byte
		switch {
		case ch >= '0' && ch <= '9':
			d = ch - '0'
		case ch >= 'a' && ch <= 'f':
			d = ch - 'a' + 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(d)
	}
	return n, true
}

// identify registers the proxy on the stream's first request and tells the source; a malformed
// node, one its identity may not act as, or a stream past the stream rate ends the stream.
func (s *Server) identify(c *conn, req request) error {
	c.mu.Lock()
	known := c.proxy != nil
	c.mu.Unlock()
	if known {
		return nil
	}
	node := req.node()
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
	c.mu.Unlock()
	c.viewChanged(s.src.View(c.id))
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
	if d := req.delta; d != nil && len(d.GetInitialResourceVersions()) > 0 {
		checked, current := 0, 0
		for name, v := range d.GetInitialResourceVersions() {
			if checked == resumeSample {
				break
			}
			checked++
			if ver, ok := parseVersion(v); ok && s.src.Holds(d.GetTypeUrl(), name, ver) {
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
