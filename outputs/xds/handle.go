package xds

import (
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/admission"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

// Requests, as the stream's goroutine applies them: the first identifies the client; one of a
// type krteds serves goes to the stream's subscription to the type (subscription.go); any other
// is answered once.

// handle applies one request to the stream.
func (st *stream) handle(req request) error {
	identified := st.proxy.Load() != nil
	if err := st.identify(req); err != nil {
		return err
	}
	if identified && st.owes && (len(req.subscribe) > 0 || len(req.initial) > 0) && !st.srv.holdsCurrent(req) {
		// Let in as resumed, it now subscribes to more than it holds current: it pays its place
		// of the stream rate, and its answers wait for it.
		st.owes = false
		st.out.waitUntil(time.Now().Add(st.srv.pay()))
	}
	t, known := typeOf(req.typeURL)
	if known && t == tLbEndpoint && !req.delta {
		known = false // glob collections exist only in delta xDS
	}
	if !known {
		st.unknownType(req)
		return nil
	}
	sb := st.subs[t]
	first := sb == nil
	if first {
		sb = newSubscription(t, st, st.srv.index, st.srv.versions)
		st.subs[t] = sb
	}
	r, err := sb.apply(req, first)
	switch r {
	case replyStale:
		st.srv.metrics.expiredNonce(t)
	case replyACK:
		st.acked(sb)
	case replyNACK:
		st.rejected(sb)
		st.nacked(t, sb)
		if t == tEndpoint {
			st.rejectedLEDS(sb)
		}
	}
	return err
}

// acked records the ACK of a subscription's response: when, and how long each input change it
// is the first to deliver to the client took to reach it.
func (st *stream) acked(sb *subscription) {
	now := time.Now()
	sb.st.AckedTime = now
	d, fresh := sb.lag.acked()
	for _, c := range fresh {
		st.srv.metrics.programmed(c, d.handed, now.UnixNano())
		st.srv.delivered(st, c, d.handed, now, "")
	}
}

// rejected records the NACK of a subscription's response: the input changes it carried did not
// reach the client.
func (st *stream) rejected(sb *subscription) {
	now := time.Now()
	d := sb.lag.nacked(now.UnixNano())
	for _, c := range d.causes {
		st.srv.delivered(st, c, d.handed, now, sb.st.LastError)
	}
}

// identify registers the proxy on the stream's first request and tells the source; a malformed
// node, one its identity may not act as, or a stream past the stream rate ends the stream.
func (st *stream) identify(req request) error {
	if st.proxy.Load() != nil {
		return nil
	}
	s := st.srv
	node := req.node
	if node == nil {
		return status.Error(codes.InvalidArgument, "the first request of a stream must carry the node")
	}
	cp, err := admission.ProxyFromNode(st.id, node)
	if err == nil {
		err = admission.Authorize(st.identity, s.trustDomain, cp.Namespace)
	}
	resumed := false
	if err == nil {
		resumed, err = s.admit(req)
	}
	if err != nil {
		s.refused(st, node.GetId(), err)
		code := status.Code(err)
		if code == codes.Unknown {
			code = codes.InvalidArgument
		}
		return status.Error(code, clip(status.Convert(err).Message()))
	}
	st.owes = resumed
	st.istioVersion = s.metrics.Istio.versionLabel(node.GetMetadata().GetFields()["ISTIO_VERSION"].GetStringValue())
	st.proxy.Store(&cp)
	s.indexNode(st)
	s.src.Connect(cp)
	// A change naming the connection, handled meanwhile, leaves its view in the inbox, which is
	// taken after this one.
	st.setView(s.src.View(st.id))
	s.metrics.clients(cp.Type, st.istioVersion, 1)
	if ok, held := s.logs.connects.allow(time.Now()); ok {
		s.log.Info("xDS client connected", zap.String("conn", st.id), zap.String("node", cp.ID), zap.String("peer", st.peer),
			zap.String("namespace", cp.Namespace), zap.String("generator", cp.Generator), zap.Int("suppressedLogLines", held))
	}
	return nil
}

// unknownAnswer is the one answer to a request of a type krteds serves no resources of: for a
// debug type, its resources, computed on a goroutine of its own (they read the streams'
// states, this one's included, through their inboxes) and ready once done is closed.
type unknownAnswer struct {
	typeURL string
	// done is closed once items and controlPlane are computed (nil: nothing to compute).
	done         chan struct{}
	items        []item
	controlPlane []byte
}

// maxDebugName bounds the resource name of a debug request krteds reads.
const maxDebugName = 1024

// unknownType queues the one answer to a request of a type krteds serves no resources of (an
// ACK of a debug answer is not answered).
func (st *stream) unknownType(req request) {
	debug := xdsdebug.IsDebugType(req.typeURL)
	if !debug {
		st.srv.metrics.UnknownTypes.Inc()
	}
	if req.nonce != "" && !(debug && !st.acksDebugAnswer(req.nonce)) {
		return
	}
	if len(st.unknown) >= maxUnknownPending {
		return
	}
	a := &unknownAnswer{typeURL: clip(req.typeURL)}
	st.unknown = append(st.unknown, a)
	if !debug {
		return
	}
	name := ""
	if names, err := req.names(st.srv.names); err == nil && len(names) > 0 && len(names[0]) <= maxDebugName {
		name = names[0]
	}
	a.done = make(chan struct{})
	go func() {
		defer st.kick()
		defer close(a.done)
		scope, ok := st.srv.debug.CallerScope(st.identity, st.loopback)
		if !ok {
			return
		}
		res, cp := st.srv.debug.Answer(scope, st.id, a.typeURL, name)
		for _, d := range res {
			a.items = append(a.items, item{res: &collections.Resource{Name: d.Name, TypeURL: d.GetResource().GetTypeUrl(), Body: d.GetResource().GetValue()}})
		}
		if cp != nil {
			a.controlPlane, _ = proto.Marshal(cp)
		}
	}()
}

// debugNoncePrefix starts the nonce of every answer to a debug type.
const debugNoncePrefix = "debug-"

// acksDebugAnswer reports whether a nonce is one of a debug answer sent on the stream: the
// request is then an ACK. A debug request with any other nonce is a new request (istioctl's
// client sends a nonce of its own with its first request; istiod answers it).
func (st *stream) acksDebugAnswer(nonce string) bool {
	n, err := strconv.ParseUint(strings.TrimPrefix(nonce, debugNoncePrefix), 10, 64)
	return err == nil && strings.HasPrefix(nonce, debugNoncePrefix) && n >= 1 && n <= st.debugSent
}

// nextAnswer is the response of the first answer queued to a type krteds serves no resources
// of, once computed (nil: none, or not yet): a debug type's resources, with a nonce of the debug
// answers; for any other type, nothing.
func (st *stream) nextAnswer() *response {
	if len(st.unknown) == 0 {
		return nil
	}
	a := st.unknown[0]
	if a.done != nil {
		select {
		case <-a.done:
		default:
			return nil // it wakes the stream once computed
		}
	}
	st.unknown = st.unknown[1:]
	r := &response{other: a.typeURL, unversioned: true, items: a.items, controlPlane: a.controlPlane}
	if a.done != nil {
		st.debugSent++
		r.nonce = debugNoncePrefix + strconv.FormatUint(st.debugSent, 10)
		r.version = r.nonce
	}
	return r
}

// nacked counts and logs (rate-limited per stream and across streams) a rejection: the client
// keeps its previous resources, and the rejected versions are not sent again until the content
// changes.
func (st *stream) nacked(t typ, sb *subscription) {
	s := st.srv
	s.metrics.rejected(t)
	now := time.Now()
	if ok, _ := st.logs.allow(now); !ok {
		return
	}
	if ok, held := s.logs.nacks.allow(now); ok {
		s.log.Warn("xDS client rejected a response", zap.String("conn", st.id), zap.String("node", clip(st.proxyID())),
			zap.String("type", t.short()), zap.String("nonce", sb.st.SentNonce), zap.String("error", sb.st.LastError),
			zap.Int("suppressedLogLines", held))
	}
}

func (st *stream) proxyID() string {
	if p := st.proxy.Load(); p != nil {
		return p.ID
	}
	return ""
}
