package xds

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/admission"
)

var _ discovery.AggregatedDiscoveryServiceServer = (*Server)(nil)

// MaxSubscriptions bounds the names one stream may subscribe to per type.
const MaxSubscriptions = 1 << 17

// maxUnknownPending bounds the answers to unknown types a stream may have queued.
const maxUnknownPending = 16

// variant is how a stream of one xDS variant reads requests and writes responses.
type variant struct {
	delta bool
	recv  func() (request, error)
	send  func(*wireMessage) error
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
		send: func(m *wireMessage) error { return stream.SendMsg(m) },
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
		send: func(m *wireMessage) error { return stream.SendMsg(m) },
	})
}

// stream is one ADS stream (istiod's Connection). Its goroutine (run) owns its state: the
// subscriptions, the view, the response in hand. Other goroutines reach it through its inbox
// (marks, a new view, questions) and read only what it publishes: the proxy it identified as.
type stream struct {
	srv         *Server
	id          string
	delta       bool
	peer        string
	connectedAt time.Time
	// identity is the authenticated client (TLS port), nil on the plaintext port; caller is who
	// the send budget serves in turn (the identity, else the connection).
	identity *admission.Identity
	caller   string
	// loopback: both ends of the connection are loopback addresses.
	loopback bool
	// slot is the stream's bit in the index's subscriber sets (set by subscriberIndex.addStream).
	slot  uint32
	inbox inbox
	// draining is set when the server is shutting down and the stream must go (Drain);
	// evicted when the send budget needs the bytes its unread response holds. Either wakes it.
	draining atomic.Bool
	evicted  atomic.Bool
	// proxy is the proxy the stream identified as (nil before its first request); it does not
	// change once set.
	proxy atomic.Pointer[collections.ConnectedProxy]

	// Owned by run.
	istioVersion string
	// nameBytes are the bytes of the names the stream's subscriptions hold, each type's apart
	// (bounded by Limits.StreamNameBytes).
	nameBytes int64
	// owes: let in past the stream rate as resumed, the stream has not paid a place of it; it
	// pays once it subscribes to more than it holds current.
	owes  bool
	view  *collections.View
	subs  [numTypes]*subscription
	nonce uint64
	out   outbound
	logs  limiter
	// unknown are requests for types krteds serves no resources of, each answered once (bounded;
	// no other state is kept for them); debugSent counts the answers to debug types, whose
	// nonces are debugNonce(n), so that an ACK of one is told from a new request.
	unknown   []*unknownAnswer
	debugSent uint64
	// ledsSent: the last response of endpoints held a LEDS form; noLEDS: the client rejected one,
	// and is sent whole CLAs; planLEDS: the plan under way resolved a LEDS form.
	ledsSent, noLEDS, planLEDS bool
	// takenAt is when the stream last took its inbox (unix ns); auditAt when it must look at its
	// lag again (audit; zero: nothing is behind), auditTimer fires then.
	takenAt    int64
	auditAt    time.Time
	auditTimer *time.Timer
}

func newStream(s *Server, delta bool, peer string, loopback bool) *stream {
	n := strconv.FormatInt(s.nextID.Add(1), 10)
	id := "sotw-" + n
	if delta {
		id = "delta-" + n
	}
	return &stream{srv: s, id: id, delta: delta, peer: peer, loopback: loopback, connectedAt: time.Now(), inbox: newInbox()}
}

// received is what the stream's reader hands its goroutine: a request, or the error that ended
// the reading.
type received struct {
	req request
	err error
}

// serve runs one stream: requests are read on a goroutine of their own and handed to the
// stream's goroutine, which applies them, takes what its inbox holds, and decides and sends
// responses one at a time: a slow client holds at most one response.
func (s *Server) serve(ctx context.Context, v variant) error {
	addr, loopback := "", false
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr, loopback = p.Addr.String(), loopbackEnds(p.Addr, p.LocalAddr)
	}
	if s.closing.Load() {
		return status.Error(codes.Unavailable, "krteds is shutting down: connect to another replica")
	}
	st := newStream(s, v.delta, addr, loopback)
	// A stream is authenticated before it holds anything: one that cannot prove an identity on
	// the TLS port is refused at once, as istiod refuses it.
	idn, tlsConn, err := admission.Authenticate(ctx, s.tokens)
	if tlsConn && err != nil {
		s.refused(st, "", err)
		return status.Error(codes.Unauthenticated, clip(err.Error()))
	}
	st.identity, st.caller = idn, "conn "+addr
	if idn != nil {
		st.caller = idn.String()
	}
	if err := s.register(st); err != nil {
		s.refused(st, "", err)
		return err
	}
	// The reader's requests, and the error that ends it (the client's, or the stream's context
	// ending), go to the stream's goroutine; once that has returned, the reader stops.
	reqs := make(chan received)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			req, err := v.recv()
			select {
			case reqs <- received{req: req, err: err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return st.run(v, reqs)
}

// run is the stream's goroutine: at each turn it takes its inbox and sends what is due, then
// waits for the next event: a request or the reader's end, a wake (a mark, the server draining,
// an eviction), its response's place granted, written or slow. It selects on as few channels
// as it may: each one is locked at every wait.
func (st *stream) run(v variant, reqs <-chan received) error {
	defer st.end()
	for {
		if st.draining.Load() {
			return status.Error(codes.Unavailable, "krteds is shutting down: reconnect")
		}
		// The lag is audited as the last event left it (before the turn answers questions),
		// and as the turn leaves it.
		st.audit(time.Now())
		if err := st.turn(v); err != nil {
			return st.fail(err)
		}
		st.armAudit(st.audit(time.Now()))
		st.inbox.setQuiet(st.quietTypes())
		select {
		case r := <-reqs:
			if r.err != nil {
				return endOfReading(r.err)
			}
			err := st.handle(r.req)
			r.req.list.release()
			if err != nil {
				return err
			}
		case <-st.inbox.wake:
		case <-st.out.granted():
		case <-st.out.paid():
			st.out.payTimer = nil
		case <-st.writtenWanted():
			st.out.wrote()
		case <-st.out.tick():
			if st.out.isWritten() {
				st.out.wrote()
			} else if err := st.out.check(st.srv.limits.SendTimeout); err != nil {
				return st.fail(err)
			}
		case <-st.auditDue():
			st.auditAt = time.Time{}
		}
	}
}

// endOfReading is what the stream returns as its reader ends with err: nothing for the client's
// end or the stream's (its context), else err.
func endOfReading(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled {
		return nil
	}
	return err
}

// drain ends the stream at its next turn: the server is shutting down.
func (st *stream) drain() {
	st.draining.Store(true)
	st.kick()
}

// errStalled: the stream's client read nothing of a response for the send timeout, or for long
// enough that the send budget needed the bytes.
var errStalled = errors.New("stalled")

// fail ends the stream with err; a stalled one's connection is closed: gRPC then drops the
// response flow control held back, and it goes back to the budget.
func (st *stream) fail(err error) error {
	if !errors.Is(err, errStalled) {
		return err
	}
	st.srv.metrics.Stalled.Inc()
	st.srv.clientConns.close(st.peer)
	return status.Errorf(codes.DeadlineExceeded, "the client read nothing of a response for %v", st.srv.limits.SendTimeout)
}

// writtenWanted fires when the response with gRPC is written, if the stream has another to send
// then; nil otherwise. A stream with nothing else due does not wake for the write: its next turn
// (the client's ACK, usually, which follows the write) notes it, and so does the progress check
// should no turn come first.
func (st *stream) writtenWanted() <-chan struct{} {
	if !st.out.handedOver() || !st.anythingDue() {
		return nil
	}
	return st.out.written()
}

// anythingDue reports whether a response would be decided were none in hand.
func (st *stream) anythingDue() bool {
	for _, sb := range st.subs {
		if sb != nil && sb.due() {
			return true
		}
	}
	return len(st.unknown) > 0
}

// quietTypes are the types whose marks need not wake the stream (a bit each): a response of the
// type awaits its ACK, so nothing of the type may be sent before that ACK, and the subscription
// is behind already (the marks would change nothing the stale audit reports but the count of
// names). The turn after the ACK takes them.
func (st *stream) quietTypes() uint8 {
	var q uint8
	for t, sb := range st.subs {
		if sb != nil && sb.inflight && sb.lag.behindSince() != 0 {
			q |= 1 << t
		}
	}
	return q
}

// end forgets the stream: its inbox, its response in hand, what it holds.
func (st *stream) end() {
	st.inbox.close()
	st.out.abandon()
	st.srv.budget.large.unclaim(st.id) // after the abandon, which may claim a next part
	st.forgetStale()
	if st.auditTimer != nil {
		st.auditTimer.Stop()
	}
	var held [numTypes][]nameID
	for t, sb := range st.subs {
		if sb != nil {
			held[t] = sb.ended()
		}
	}
	st.srv.unregister(st, &held)
}

// kick wakes the stream (from any goroutine).
func (st *stream) kick() { st.inbox.kick() }

// evict ends the stream at its next turn: its unread response holds bytes the budget needs.
func (st *stream) evict() {
	st.evicted.Store(true)
	st.kick()
}

// connectedProxy is the proxy the stream identified as (nil before its first request).
func (st *stream) connectedProxy() *collections.ConnectedProxy { return st.proxy.Load() }

// charge counts names newly held by a subscription of the stream, refusing them past the
// stream's bound.
func (st *stream) charge(names *nameTable, ids []nameID) error {
	var n int64
	for _, id := range ids {
		n += int64(len(names.name(id)))
	}
	if max := st.srv.limits.StreamNameBytes; st.nameBytes+n > max {
		return status.Errorf(codes.ResourceExhausted, "the stream's names would hold %d bytes; at most %d", st.nameBytes+n, max)
	}
	st.nameBytes += n
	return nil
}

// uncharge counts a name no longer held by a subscription of the stream.
func (st *stream) uncharge(names *nameTable, id nameID) {
	st.nameBytes -= int64(len(names.name(id)))
}
