// Package xds serves resources over ADS, state of the world and delta. It keeps the protocol
// state of each stream (subscriptions, versions held, nonces, ACKs and NACKs) and nothing else:
// which bytes a proxy gets for a name comes from a Source.
//
// The files, in the order a request meets them: stream.go (the gRPC streams, the loop that
// sends), admission.go (who may open a stream), subscription.go (the protocol rules of one
// stream's subscription to one type), index.go (which streams hold which names), response.go
// (what is sent next), wire.go and requests.go (the bytes), flight.go (the send budget).
package xds

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"go.uber.org/zap"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/collections"
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
	LoadReports *LoadReports
	// Tokens lets TLS clients without a certificate authenticate with a bearer token in the
	// "authorization" gRPC metadata (nil: certificates only).
	Tokens TokenAuthenticator
	// For the xDS debug types: the system namespace (its identities see every proxy), the
	// control plane identifier sent with istio.io/debug/syncz (istiod's JSON of component,
	// instance ID and build), and the debug pages istio.io/debug reads (nil: none).
	SystemNamespace string
	ControlPlaneID  string
	DebugPages      http.Handler
}

// Server is krteds' ADS server.
type Server struct {
	src             Source
	clusterID       string
	trustDomain     string
	systemNamespace string
	controlPlane    *core.ControlPlane
	debugPages      http.Handler
	loadReports     *LoadReports
	tokens          TokenAuthenticator
	log             *zap.Logger
	logs            *serverLogs
	metrics         *Metrics
	names           *nameTable
	versions        *versionTable
	index           *subscriberIndex
	// limits are the server's bounds; budget the send budget, streamRate the admission of new
	// streams (nil: unlimited).
	limits     Limits
	budget     *sendBudget
	streamRate *rate.Limiter

	synced atomic.Bool
	// closing: the server is shutting down; it takes no new stream.
	closing atomic.Bool
	nextID  atomic.Int64

	mu    sync.RWMutex
	conns map[string]*conn
	// identities counts the open streams of each authenticated identity.
	identities map[Identity]int
	// byNode lists the identified streams by node id.
	byNode map[string][]*conn
	// clientConns are the connections of the gRPC servers serving s, by remote address.
	clientConns *connTracker
}

// NewServer builds a server over a source. Call Start before serving streams.
func NewServer(src Source, o Options) *Server {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	s := &Server{src: src, clusterID: o.ClusterID, trustDomain: o.TrustDomain, systemNamespace: o.SystemNamespace, debugPages: o.DebugPages,
		loadReports: o.LoadReports, tokens: o.Tokens, log: o.Log, logs: newServerLogs(), metrics: o.Metrics,
		names: newNameTable(), versions: newVersionTable(),
		conns: map[string]*conn{}, identities: map[Identity]int{}, byNode: map[string][]*conn{}, clientConns: newConnTracker()}
	if o.ControlPlaneID != "" {
		s.controlPlane = &core.ControlPlane{Identifier: o.ControlPlaneID}
	}
	s.index = newSubscriberIndex(s.names, src.Follows)
	s.limits = o.Limits.WithDefaults()
	s.budget = newSendBudget(s.limits.SendBudget, s.limits.LargeResponses, s.metrics)
	if r := s.limits.StreamRate; r > 0 {
		s.streamRate = rate.NewLimiter(rate.Limit(r), max(1, int(r)))
	}
	if o.LoadReports != nil {
		o.LoadReports.srv = s
	}
	return s
}

// Start follows the source's changes and, once it has synced, answers the streams opened so far.
func (s *Server) Start(stop <-chan struct{}) {
	s.src.Subscribe(s.onChange)
	go func() {
		if !s.src.WaitUntilSynced(stop) {
			return
		}
		s.synced.Store(true)
		s.log.Info("source synced; answering xDS requests")
		s.mu.RLock()
		for _, c := range s.conns {
			c.kick()
		}
		s.mu.RUnlock()
	}()
}

// Synced reports whether the server answers requests.
func (s *Server) Synced() bool { return s.synced.Load() }

// Serving reports whether the server takes streams: it has synced and is not shutting down.
func (s *Server) Serving() bool { return s.synced.Load() && !s.closing.Load() }

// Close makes the server take no new stream (it answers the open ones until Drain ends them).
func (s *Server) Close() { s.closing.Store(true) }

// sentTo is what the server sent the proxy of a node id (on a stream of the same identity): a
// function reporting whether a cluster or CLA of a name is one of them. It reads the streams
// once; the function reads only those streams.
func (s *Server) sentTo(nodeID string, idn *Identity) func(name string) bool {
	s.mu.RLock()
	var cs []*conn
	for _, c := range s.byNode[nodeID] {
		if (c.identity == nil) == (idn == nil) && (idn == nil || *c.identity == *idn) {
			cs = append(cs, c)
		}
	}
	s.mu.RUnlock()
	return func(name string) bool {
		id, known := s.names.lookup(name)
		if !known {
			return false
		}
		for _, c := range cs {
			if c.hasSent(id) {
				return true
			}
		}
		return false
	}
}

// onChange marks the changed names dirty on every stream that holds or lists them.
func (s *Server) onChange(ch collections.Change) {
	at := ch.At.UnixNano()
	if ch.At.IsZero() {
		at = time.Now().UnixNano()
	}
	if len(ch.Conns) > 0 {
		s.mu.RLock()
		cs := make([]*conn, 0, len(ch.Conns))
		for _, id := range ch.Conns {
			if c := s.conns[id]; c != nil {
				cs = append(cs, c)
			}
		}
		s.mu.RUnlock()
		for _, c := range cs {
			c.viewChanged(s.src.View(c.id))
		}
	}
	t, ok := typeOf(ch.TypeURL)
	if !ok || len(ch.Names) == 0 {
		return
	}
	streams, ids, idNames := s.index.touched(t, ch.Names)
	for c, ids := range streams {
		c.markDirty(t, ids, at)
	}
	// Recorded once every stream holding the names has been told (LastChange says so), for the
	// names their ids still stand for.
	for i, id := range ids {
		s.names.setTold(id, idNames[i], t, at)
	}
}

// register adds a stream; an identity that already holds as many streams as it may is refused.
func (s *Server) register(c *conn) error {
	s.mu.Lock()
	if c.identity != nil {
		if s.identities[*c.identity] >= s.limits.StreamsPerIdentity {
			s.mu.Unlock()
			return status.Errorf(codes.ResourceExhausted, "identity %s holds %d streams, the most one identity may", c.identity, s.limits.StreamsPerIdentity)
		}
		s.identities[*c.identity]++
	}
	s.conns[c.id] = c
	s.mu.Unlock()
	s.index.addStream(c)
	return nil
}

// unregister removes a stream, its index entries and its references to names, and tells the
// source the proxy left.
func (s *Server) unregister(c *conn) {
	// A response gRPC holds for a stream that has ended no longer counts: its connection is gone
	// (and the response with it), or gRPC drops it with the stream.
	if p := c.unwritten; p != nil {
		p.abandon()
	}
	held, proxy := c.close()
	if proxy != nil {
		s.src.Disconnect(c.id)
	}
	s.mu.Lock()
	delete(s.conns, c.id)
	if proxy != nil {
		s.unindexNodeLocked(c)
	}
	if c.identity != nil {
		if s.identities[*c.identity]--; s.identities[*c.identity] <= 0 {
			delete(s.identities, *c.identity)
		}
	}
	s.mu.Unlock()
	s.index.removeStream(c, &held)
	if proxy != nil {
		s.metrics.clients(proxy.Type, c.istioVersion, -1)
		if ok, held := s.logs.disconnects.allow(time.Now()); ok {
			s.log.Info("xDS client disconnected", zap.String("conn", c.id), zap.Int("suppressedLogLines", held))
		}
	}
}

// indexNode lists an identified stream under its node id (c.mu held, then s.mu).
func (s *Server) indexNode(c *conn) {
	s.mu.Lock()
	s.byNode[c.proxy.ID] = append(s.byNode[c.proxy.ID], c)
	s.mu.Unlock()
}

func (s *Server) unindexNodeLocked(c *conn) {
	cs := slices.DeleteFunc(s.byNode[c.proxy.ID], func(o *conn) bool { return o == c })
	if len(cs) == 0 {
		delete(s.byNode, c.proxy.ID)
	} else {
		s.byNode[c.proxy.ID] = cs
	}
}

func (s *Server) newConnID(delta bool) string {
	n := strconv.FormatInt(s.nextID.Add(1), 10)
	if delta {
		return "delta-" + n
	}
	return "sotw-" + n
}

// ConnStatus is the protocol state of one stream, for /debug/syncz and /debug/adsz.
type ConnStatus struct {
	ConnID      string    `json:"connectionId"`
	Delta       bool      `json:"delta"`
	Peer        string    `json:"peer,omitempty"`
	ConnectedAt time.Time `json:"connectedAt"`
	// IstioVersion is the client's ISTIO_VERSION as the pilot_xds metric labels it ("other"
	// past the distinct versions counted).
	IstioVersion string                      `json:"istioVersion,omitempty"`
	Proxy        *collections.ConnectedProxy `json:"proxy,omitempty"`
	View         *collections.View           `json:"view,omitempty"`
	Watches      map[string][]string         `json:"watches"`
	Types        map[string]TypeStatus       `json:"resources"`
}

// TypeStatus is the protocol state of one type on one stream.
type TypeStatus struct {
	SentVersion  string    `json:"sentVersion,omitempty"`
	SentNonce    string    `json:"sentNonce,omitempty"`
	SentTime     time.Time `json:"sentTime,omitempty"`
	AckedVersion string    `json:"ackedVersion,omitempty"`
	AckedNonce   string    `json:"ackedNonce,omitempty"`
	LastError    string    `json:"lastError,omitempty"`
	NACKs        int       `json:"nacks,omitempty"`
	Responses    int       `json:"responses,omitempty"`
	Subscribed   int       `json:"subscribed"`
}

// Status lists every stream, ordered by connection id.
func (s *Server) Status() []ConnStatus {
	s.mu.RLock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.RUnlock()
	out := make([]ConnStatus, 0, len(conns))
	for _, c := range conns {
		out = append(out, c.status(s.names))
	}
	slices.SortFunc(out, func(a, b ConnStatus) int { return strings.Compare(a.ConnID, b.ConnID) })
	return out
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
