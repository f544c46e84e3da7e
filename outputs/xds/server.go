// Package xds serves resources over ADS, state of the world and delta. It keeps the protocol
// state of each stream (subscriptions, versions held, nonces, ACKs and NACKs) and nothing else:
// which bytes a proxy gets for a name comes from a Source.
package xds

import (
	"net/http"
	"runtime"
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

// Server is krteds' ADS server.
type Server struct {
	src         Source
	clusterID   string
	trustDomain string
	// For the xDS debug types (SetDebug).
	systemNamespace string
	controlPlane    *core.ControlPlane
	debugPages      http.Handler
	// loadReports serves LRS on the same gRPC servers (nil: LRS off).
	loadReports *LoadReports
	tokens      TokenAuthenticator
	log         *zap.Logger
	logs        *serverLogs
	metrics     *Metrics
	names       *nameTable
	versions    *versionTable
	// limits are the server's bounds (SetLimits); budget the send budget, streamRate the
	// admission of new streams (nil: unlimited).
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
	// slots numbers the streams: a stream's slot is its bit in the subscriber sets; free lists
	// the slots of closed streams, reused first so that the sets stay short.
	slots []*conn
	free  []uint32
	// subscribers indexes, per type and nameID, the streams subscribed to (or holding) each
	// name; wildcard lists the streams subscribed to all of a type.
	subscribers [numTypes][]connSet
	wildcard    [numTypes]map[*conn]struct{}
	// followers indexes, per type, the subscribed names whose resources follow another name
	// (Source.Follows), by that name; an entry lives as long as its name has subscribers.
	followers [numTypes]map[string][]nameID
}

// NewServer builds a server over a source. Call Start before serving streams.
func NewServer(src Source, clusterID string, log *zap.Logger, m *Metrics) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	s := &Server{src: src, clusterID: clusterID, log: log, logs: newServerLogs(), metrics: m, names: newNameTable(), versions: newVersionTable(),
		conns: map[string]*conn{}, identities: map[Identity]int{}, byNode: map[string][]*conn{}, clientConns: newConnTracker()}
	s.SetLimits(Limits{})
	for t := range numTypes {
		s.wildcard[t] = map[*conn]struct{}{}
		s.followers[t] = map[string][]nameID{}
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

// Limits bound what the server holds and how fast it takes on new streams. Zero fields take the
// defaults.
type Limits struct {
	// StreamsPerIdentity bounds the open streams of one authenticated identity (a namespace's
	// service account: a Deployment of thousands of replicas shares one).
	StreamsPerIdentity int
	// SendBudget bounds the bytes of responses handed to gRPC and not yet written, or being
	// encoded, all streams together (flight.go).
	SendBudget int64
	// ResponseBytes bounds one response: a larger answer of a type that may be split (any type
	// on delta streams but LEDS, endpoints and routes on state of the world) goes out in parts,
	// each acknowledged before the next; a single resource larger than it goes alone.
	ResponseBytes int
	// SendTimeout is how long a client may take to read a response before its stream is closed
	// (its budget is held meanwhile); negative: no limit.
	SendTimeout time.Duration
	// StreamRate is the new streams per second let in; past it a new stream is told to retry
	// (RESOURCE_EXHAUSTED), unless it is a delta stream coming back with versions that are
	// current. Negative: no limit.
	StreamRate float64
	// LargeResponses bounds the responses over 64 KiB in flight at once (the next part of an
	// answer under way goes first); negative: no bound.
	LargeResponses int
}

// Default limits.
const (
	DefaultMaxStreamsPerIdentity = 20000
	DefaultResponseBytes         = 1 << 20
	DefaultSendTimeout           = time.Minute
)

// DefaultStreamRate is the new streams per second let in by default: 500 per CPU (a herd of a
// thousand proxies is let in within a second on two cores; the send budget paces what they
// are sent).
func DefaultStreamRate() float64 { return 500 * float64(runtime.GOMAXPROCS(0)) }

// WithDefaults fills the zero fields of l.
func (l Limits) WithDefaults() Limits {
	if l.StreamsPerIdentity <= 0 {
		l.StreamsPerIdentity = DefaultMaxStreamsPerIdentity
	}
	if l.SendBudget <= 0 {
		l.SendBudget = DefaultSendBudget
	}
	if l.ResponseBytes <= 0 {
		l.ResponseBytes = DefaultResponseBytes
	}
	if l.SendTimeout == 0 {
		l.SendTimeout = DefaultSendTimeout
	}
	if l.StreamRate == 0 {
		l.StreamRate = DefaultStreamRate()
	}
	if l.LargeResponses == 0 {
		l.LargeResponses = DefaultLargeResponses()
	}
	return l
}

// SetLimits sets the server's bounds; call it before serving streams.
func (s *Server) SetLimits(l Limits) {
	s.limits = l.WithDefaults()
	s.budget = newSendBudget(s.limits.SendBudget, s.limits.LargeResponses, s.metrics)
	s.streamRate = nil
	if r := s.limits.StreamRate; r > 0 {
		s.streamRate = rate.NewLimiter(rate.Limit(r), max(1, int(r)))
	}
}

// SetTrustDomain sets the trust domain authenticated identities must belong to.
func (s *Server) SetTrustDomain(td string) { s.trustDomain = td }

// SetLoadReports serves LRS with l on the gRPC servers made after (NewGRPCServer): its streams
// are authenticated as ADS streams are, and count only what the server sent their proxy.
func (s *Server) SetLoadReports(l *LoadReports) {
	s.loadReports = l
	l.srv = s
}

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
			if c.sent(id) {
				return true
			}
		}
		return false
	}
}

// SetDebug sets what the xDS debug types need: the system namespace (its identities see every
// proxy), the control plane identifier sent with istio.io/debug/syncz (istiod's JSON of
// component, instance ID and build), and the debug pages istio.io/debug reads.
func (s *Server) SetDebug(systemNamespace, controlPlaneID string, pages http.Handler) {
	s.systemNamespace, s.debugPages = systemNamespace, pages
	if controlPlaneID != "" {
		s.controlPlane = &core.ControlPlane{Identifier: controlPlaneID}
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
	touched := map[*conn][]nameID{}
	var ids []nameID
	var idNames []string // the name of each of ids, as looked up
	s.mu.RLock()
	for _, n := range ch.Names {
		id, known := s.names.lookup(n)
		if known {
			ids, idNames = append(ids, id), append(idNames, n)
			s.subscribersLocked(t, id).each(func(slot uint32) {
				c := s.slots[slot]
				touched[c] = append(touched[c], id)
			})
		}
		// The subscribed names whose resources follow n.
		for _, fid := range s.followers[t][n] {
			if !slices.Contains(ids, fid) {
				ids, idNames = append(ids, fid), append(idNames, s.names.name(fid))
			}
			s.subscribersLocked(t, fid).each(func(slot uint32) {
				c := s.slots[slot]
				if !slices.Contains(touched[c], fid) {
					touched[c] = append(touched[c], fid)
				}
			})
		}
		for c := range s.wildcard[t] {
			if !known {
				// A resource new to every stream: the wildcard streams list everything again.
				touched[c] = nil
			} else if !slices.Contains(touched[c], id) {
				touched[c] = append(touched[c], id)
			}
		}
	}
	s.mu.RUnlock()
	for c, ids := range touched {
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
	if n := len(s.free); n > 0 {
		c.slot = s.free[n-1]
		s.free = s.free[:n-1]
		s.slots[c.slot] = c
	} else {
		c.slot = uint32(len(s.slots))
		s.slots = append(s.slots, c)
	}
	s.mu.Unlock()
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
	c.mu.Lock()
	c.closed = true
	var held [numTypes][]nameID
	for t, st := range c.types {
		if st == nil {
			continue
		}
		st.subs.each(func(id nameID, _ sub) { held[t] = append(held[t], id) })
		st.subs.reset()
	}
	registered := c.proxy != nil
	proxyType, istioVersion := "", c.istioVersion
	if registered {
		proxyType = c.proxy.Type
		s.src.Disconnect(c.id)
	}
	c.mu.Unlock()
	s.mu.Lock()
	delete(s.conns, c.id)
	if registered {
		s.unindexNodeLocked(c)
	}
	if c.identity != nil {
		if s.identities[*c.identity]--; s.identities[*c.identity] <= 0 {
			delete(s.identities, *c.identity)
		}
	}
	for t := range numTypes {
		delete(s.wildcard[t], c)
		for _, id := range held[t] {
			s.unindexLocked(typ(t), id, c)
		}
	}
	// The names are released before the stream leaves the index, so that a server without
	// streams holds no names.
	for t := range numTypes {
		for _, id := range held[t] {
			s.names.release(id)
		}
	}
	s.slots[c.slot] = nil
	s.free = append(s.free, c.slot)
	s.mu.Unlock()
	if registered {
		s.metrics.clients(proxyType, istioVersion, -1)
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

// subscribersLocked is the set of streams holding name id of type t (s.mu held).
func (s *Server) subscribersLocked(t typ, id nameID) connSet {
	if int(id) < len(s.subscribers[t]) {
		return s.subscribers[t][id]
	}
	return nil
}

// indexLocked records that c holds name id of type t (s.mu held).
func (s *Server) indexLocked(t typ, id nameID, c *conn) {
	if n := int(id) + 1; n > len(s.subscribers[t]) {
		s.subscribers[t] = append(s.subscribers[t], make([]connSet, n-len(s.subscribers[t]))...)
	}
	set := &s.subscribers[t][id]
	if len(*set) == 0 {
		s.followLocked(t, id, true)
	}
	set.add(c.slot)
}

func (s *Server) unindexLocked(t typ, id nameID, c *conn) {
	if int(id) >= len(s.subscribers[t]) {
		return
	}
	set := &s.subscribers[t][id]
	if len(*set) == 0 {
		return
	}
	if set.remove(c.slot) {
		s.followLocked(t, id, false)
	}
}

// followLocked adds (on) or removes name id of type t from the followers of the name its
// resource follows, if any (s.mu held; the name is interned).
func (s *Server) followLocked(t typ, id nameID, on bool) {
	leader := s.src.Follows(t.url(), s.names.name(id))
	if leader == "" {
		return
	}
	fs := s.followers[t][leader]
	if on {
		s.followers[t][leader] = append(fs, id)
		return
	}
	if i := slices.Index(fs, id); i >= 0 {
		fs[i] = fs[len(fs)-1]
		fs = fs[:len(fs)-1]
	}
	if len(fs) == 0 {
		delete(s.followers[t], leader)
	} else {
		s.followers[t][leader] = fs
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
