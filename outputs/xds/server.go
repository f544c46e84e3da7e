// Package xds serves resources over ADS, state of the world and delta. It keeps the protocol
// state of each stream (subscriptions, versions held, nonces, ACKs and NACKs) and nothing else:
// which bytes a proxy gets for a name comes from a Source.
//
// Every piece of state has one owner. A stream's goroutine owns the stream (stream.go: its wait
// loop; turn.go: what each turn does): its subscriptions (subscription.go, plain values planned
// in plan.go), its view, the response in hand (outbound.go); other goroutines reach it only
// through its inbox (inbox.go). What streams share sits behind one lock each, its order stated
// on its type: the registry of streams (registry.go), the index of who holds which name
// (index.go), the interned names (names.go) and versions (intern.go), the send budget
// (flight.go). A request meets, in order: stream.go, handle.go, subscription.go; a response:
// turn.go, next.go, plan.go, outbound.go, wire.go. How fast new streams are let in is
// admit.go's; who may open one is decided in package admission, load reports are served by
// package lrs, the debug answers by package xdsdebug.
package xds

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/admission"
	"github.com/krteds/krteds/outputs/xds/lrs"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

// Options configure a server. Only ClusterID matters to every server; the zero value of each
// other field is a working default.
type Options struct {
	// ClusterID is the cluster the server runs in (istiod's CLUSTER_ID).
	ClusterID string
	// TrustDomain is the trust domain authenticated identities must belong to ("": any).
	TrustDomain string
	// Log and Metrics: nil for none (metrics then go to an unregistered set).
	Log     *zap.Logger
	Metrics *Metrics
	// Limits bound what the server holds and how fast it takes on new streams.
	Limits Limits
	// LoadReports serves LRS on the gRPC servers made by NewGRPCServer (nil: LRS off); its
	// streams are authenticated as ADS streams are, and count only what the server sent their
	// proxy.
	LoadReports *lrs.LoadReports
	// Tokens lets TLS clients without a certificate authenticate with a bearer token in the
	// "authorization" gRPC metadata (nil: certificates only).
	Tokens admission.TokenAuthenticator
	// For the xDS debug types: the system namespace (its identities see every proxy), the
	// control plane identifier sent with istio.io/debug/syncz (istiod's JSON of component,
	// instance ID and build), and the debug pages istio.io/debug reads (nil: none).
	SystemNamespace string
	ControlPlaneID  string
	DebugPages      http.Handler
	// Delivered is told, on the stream's goroutine, each input change a response is the first
	// to deliver to its client, as the client acknowledges or rejects it (nil: nobody). It must
	// not wait.
	Delivered func(Delivery)
}

// Delivery is an input change reaching a proxy: the change, when the server first learned of a
// resource computed for it, when the response carrying it went to gRPC, and when the client
// acknowledged it, or rejected it with Error.
type Delivery struct {
	Cause                  collections.Cause
	Computed, Handed, Done time.Time
	ConnID, NodeID         string
	Error                  string
}

// Server is krteds' ADS server.
type Server struct {
	src         Source
	trustDomain string
	loadReports *lrs.LoadReports
	tokens      admission.TokenAuthenticator
	debug       *xdsdebug.Debug
	log         *zap.Logger
	logs        *serverLogs
	onDelivered func(Delivery)
	metrics     *Metrics
	names       *nameTable
	versions    *versionTable
	index       *subscriberIndex
	// limits are the server's bounds; budget the send budget, streamRate the admission of new
	// streams (nil: unlimited).
	limits     Limits
	budget     *sendBudget
	streamRate *rate.Limiter
	// clientConns are the connections of the gRPC servers serving s, by remote address.
	clientConns *connTracker

	synced atomic.Bool
	// closing: the server is shutting down; it takes no new stream.
	closing atomic.Bool
	nextID  atomic.Int64

	// mu guards the registry of streams below; it is taken alone (no other lock under it).
	mu      sync.RWMutex
	streams map[string]*stream
	// identities counts the open streams of each authenticated identity.
	identities map[admission.Identity]int
	// byNode lists the identified streams by node id.
	byNode map[string][]*stream
}

// NewServer builds a server over a source. Call Start before serving streams.
func NewServer(src Source, o Options) *Server {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	s := &Server{src: src, trustDomain: o.TrustDomain, loadReports: o.LoadReports, tokens: o.Tokens, log: o.Log, logs: newServerLogs(), onDelivered: o.Delivered,
		metrics: o.Metrics, versions: newVersionTable(), clientConns: newConnTracker(), limits: o.Limits.WithDefaults(),
		streams: map[string]*stream{}, identities: map[admission.Identity]int{}, byNode: map[string][]*stream{}}
	s.debug = xdsdebug.New(s, xdsdebug.Options{ClusterID: o.ClusterID, SystemNamespace: o.SystemNamespace, ControlPlaneID: o.ControlPlaneID,
		Pages: o.DebugPages})
	s.names = newNameTable(s.limits.CallerNameBytes)
	s.index = newSubscriberIndex(s.names, src.Follows)
	s.budget = newSendBudget(s.limits.SendBudget, s.limits.LargeResponses, s.metrics)
	if r := s.limits.StreamRate; r > 0 {
		s.streamRate = rate.NewLimiter(rate.Limit(r), max(1, int(r)))
	}
	if o.LoadReports != nil {
		o.LoadReports.Bind(s, o.Tokens, o.TrustDomain)
	}
	return s
}

// Debug answers the debug questions about the server's streams.
func (s *Server) Debug() *xdsdebug.Debug { return s.debug }

// Start follows the source's changes and, once it has synced, answers the streams opened so far.
func (s *Server) Start(stop <-chan struct{}) {
	s.src.Subscribe(s.onChange)
	go func() {
		if !s.src.WaitUntilSynced(stop) {
			return
		}
		s.synced.Store(true)
		s.log.Info("source synced; answering xDS requests")
		for _, st := range s.all() {
			st.kick()
		}
	}()
}

// Synced reports whether the server answers requests.
func (s *Server) Synced() bool { return s.synced.Load() }

// Serving reports whether the server takes streams: it has synced and is not shutting down.
func (s *Server) Serving() bool { return s.synced.Load() && !s.closing.Load() }

// Close makes the server take no new stream (it answers the open ones until Drain ends them).
func (s *Server) Close() { s.closing.Store(true) }

// onChange leaves the changed names in the inbox of every stream that holds or lists them, and a
// new view in the inbox of each stream the change names.
func (s *Server) onChange(ch collections.Change) {
	at := ch.At.UnixNano()
	if ch.At.IsZero() {
		at = time.Now().UnixNano()
	}
	if len(ch.Conns) > 0 {
		s.mu.RLock()
		sts := make([]*stream, 0, len(ch.Conns))
		for _, id := range ch.Conns {
			if st := s.streams[id]; st != nil {
				sts = append(sts, st)
			}
		}
		s.mu.RUnlock()
		for _, st := range sts {
			st.inbox.setView(s.src.View(st.id))
		}
	}
	t, ok := typeOf(ch.TypeURL)
	if !ok || len(ch.Names) == 0 {
		return
	}
	streams, ids, idNames := s.index.touched(t, ch.Names)
	s.names.setChanged(ids, idNames, t, time.Now().UnixNano(), at, ch.CauseOf())
	for i, tc := range *streams {
		tc.st.inbox.mark(t, tc.ids, at)
		(*streams)[i] = touch{} // the pool keeps no stream
	}
	touches.Put(streams)
	// Recorded once every stream holding the names has been told (LastChange says so), for the
	// names their ids still stand for.
	s.names.setTold(ids, idNames, t, at)
}

// pushed records a response in the metrics.
func (s *Server) pushed(r *response, at time.Time) {
	if r.other != "" {
		return
	}
	bytes := 0
	for _, it := range r.items {
		bytes += len(it.res.Body)
		if it.update && it.at != 0 {
			s.metrics.converged(r.t, at.Sub(time.Unix(0, it.at)).Seconds())
		}
	}
	s.metrics.pushed(r.t, bytes, time.Since(at).Seconds())
}

// SendBudget is the bytes of responses in flight now, the most ever in flight at once, and the
// budget.
func (s *Server) SendBudget() (inFlight, peak, capacity int64) {
	return s.budget.inFlight(), s.budget.peak.Load(), s.budget.capacity()
}

// Subscriptions is the number of distinct names streams subscribe to (or hold).
func (s *Server) Subscriptions() int { return s.names.size() }

// LastChange is the input change behind the latest change of a subscribed resource that every
// stream holding it has been told of (zero if none, or if no stream subscribes to it).
func (s *Server) LastChange(typeURL, name string) time.Time {
	t, ok := typeOf(typeURL)
	if !ok {
		return time.Time{}
	}
	id, known := s.names.lookup(name)
	if !known {
		return time.Time{}
	}
	if at := s.names.told(id, t); at != 0 {
		return time.Unix(0, at)
	}
	return time.Time{}
}

// Drain ends every open stream, spread evenly over d (at once when d is 0), each with
// UNAVAILABLE: its client reconnects, and where the connection has been told to go (GOAWAY) it
// does so on a new connection, to another replica. It returns once every stream has been told,
// or ctx ends.
func (s *Server) Drain(ctx context.Context, d time.Duration) {
	sts := s.all()
	slices.SortFunc(sts, func(a, b *stream) int { return int(connSeq(a.id) - connSeq(b.id)) })
	if ok, _ := s.logs.disconnects.allow(time.Now()); ok {
		s.log.Info("draining xDS streams", zap.Int("streams", len(sts)), zap.Duration("over", d))
	}
	var step time.Duration
	if len(sts) > 0 {
		step = d / time.Duration(len(sts))
	}
	for i, st := range sts {
		if i > 0 && step > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(step):
			}
		}
		st.drain()
	}
}
