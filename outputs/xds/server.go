// Package xds serves krteds' graph outputs over ADS (state of the world and delta) through
// go-control-plane's server, with a watch implementation that reads the krt collections
// directly: no snapshots are built, every resource is marshalled once in the graph and shared.
package xds

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"go.uber.org/zap"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/transforms"
)

// Server is the watch side of krteds' ADS server: it implements go-control-plane's cache.Cache
// and its stream callbacks.
type Server struct {
	g           *graphs.Graph
	clusterID   string
	trustDomain string
	tokens      TokenAuthenticator
	log         *zap.Logger
	metrics     *Metrics
	res         resolver

	synced atomic.Bool

	// changedAt is when the input change behind each resource's latest version was observed,
	// for the convergence-time metric.
	changedMu sync.Mutex
	changedAt map[string]time.Time

	mu      sync.Mutex
	conns   map[string]*conn
	reqConn map[any]*conn
	// byName indexes connections by type and subscribed name, whether or not a watch is open
	// right now (a change between a response and the next request must not be lost); byType
	// lists every connection subscribed to a type, and wild those subscribed to all of it.
	byName map[string]map[string]map[*conn]struct{}
	byType map[string]map[*conn]struct{}
	wild   map[string]map[*conn]struct{}
}

// NewServer builds the server over the graph. Call Start before serving streams.
func NewServer(g *graphs.Graph, clusterID string, log *zap.Logger, m *Metrics) *Server {
	if log == nil {
		log = zap.NewNop()
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	return &Server{
		g:         g,
		clusterID: clusterID,
		log:       log,
		metrics:   m,
		res:       resolver{g: g, empty: newEmptyCache()},
		conns:     map[string]*conn{},
		changedAt: map[string]time.Time{},
		reqConn:   map[any]*conn{},
		byName:    map[string]map[string]map[*conn]struct{}{},
		byType:    map[string]map[*conn]struct{}{},
		wild:      map[string]map[*conn]struct{}{},
	}
}

// Start subscribes to the graph's outputs and, once the graph has synced, answers the watches
// opened so far. No response is sent before that.
func (s *Server) Start(stop <-chan struct{}) {
	s.g.CLAs.RegisterBatch(func(evs []krt.Event[collections.Resource]) {
		names := map[string]struct{}{}
		for _, e := range evs {
			names[e.Latest().Name] = struct{}{}
		}
		s.markChanged(transforms.TypeCLA, names)
		s.evaluateNames(transforms.TypeCLA, names)
	}, false)
	for typeURL, c := range map[string]krt.Collection[collections.Resource]{
		transforms.TypeCluster:  s.g.Clusters,
		transforms.TypeListener: s.g.Listeners,
		transforms.TypeRoute:    s.g.Routes,
	} {
		c.RegisterBatch(func(evs []krt.Event[collections.Resource]) {
			names := map[string]struct{}{}
			for _, e := range evs {
				names[e.Latest().Name] = struct{}{}
			}
			s.markChanged(typeURL, names)
			s.evaluateType(typeURL, names)
		}, false)
	}
	// Visibility (exportTo) lives on the Service, not in the CLA bytes: a Service change looks
	// at its clusters again.
	s.g.ServiceInfos.RegisterBatch(func(evs []krt.Event[collections.ServiceInfo]) {
		names := map[string]struct{}{}
		for _, e := range evs {
			for _, svc := range e.Items() {
				pol := s.g.ServicePolicies.GetKey(svc.ResourceName())
				for _, p := range svc.Ports {
					for _, subset := range append([]string{""}, pol.Subsets()...) {
						names[transforms.ClusterName(p.Port, subset, svc.Hostname)] = struct{}{}
					}
				}
			}
		}
		s.evaluateNames(transforms.TypeCLA, names)
	}, false)
	s.g.Proxies.RegisterBatch(func(evs []krt.Event[collections.Proxy]) {
		for _, e := range evs {
			s.evaluateConn(e.Latest().ConnID)
		}
	}, false)
	go func() {
		if !s.g.WaitUntilSynced(stop) {
			return
		}
		s.synced.Store(true)
		s.log.Info("graph synced; answering xDS requests")
		s.evaluateAll()
	}()
}

// markChanged notes, for the convergence metric, that these resources changed because of the
// latest input change.
func (s *Server) markChanged(typeURL string, names map[string]struct{}) {
	at := s.g.Graph.LastInputChange()
	if at.IsZero() {
		return
	}
	s.changedMu.Lock()
	defer s.changedMu.Unlock()
	if len(s.changedAt) > 100000 {
		clear(s.changedAt)
	}
	for n := range names {
		s.changedAt[typeURL+"/"+n] = at
	}
}

// observeConvergence records, for each resource sent as an update of one the client had, the time
// since the input change behind it.
func (s *Server) observeConvergence(typeURL string, sent []string, returned map[string]string) {
	now := time.Now()
	s.changedMu.Lock()
	defer s.changedMu.Unlock()
	for _, n := range sent {
		if _, had := returned[n]; !had {
			continue
		}
		if at, ok := s.changedAt[typeURL+"/"+n]; ok {
			s.metrics.Convergence.WithLabelValues(shortType(typeURL)).Observe(now.Sub(at).Seconds())
		}
	}
}

// Synced reports whether the server answers requests (the graph has synced).
func (s *Server) Synced() bool { return s.synced.Load() }

// typeStatus is the per-connection, per-type protocol state.
type typeStatus struct {
	SentVersion  string    `json:"sentVersion,omitempty"`
	SentNonce    string    `json:"sentNonce,omitempty"`
	SentTime     time.Time `json:"sentTime,omitempty"`
	AckedVersion string    `json:"ackedVersion,omitempty"`
	AckedNonce   string    `json:"ackedNonce,omitempty"`
	LastError    string    `json:"lastError,omitempty"`
	NACKs        int       `json:"nacks,omitempty"`
	Responses    int       `json:"responses,omitempty"`
	responded    bool
}

// conn is one ADS stream.
type conn struct {
	id          string
	delta       bool
	connectedAt time.Time
	done        chan struct{}

	// identity is the authenticated client (TLS port), nil on the plaintext port; authErr says
	// why a TLS client has no usable identity.
	identity *Identity
	authErr  error

	mu       sync.Mutex
	proxy    *collections.ConnectedProxy
	lastReq  any
	watches  map[string]*watch
	status   map[string]*typeStatus
	forceEDS bool
	// dirty holds, per type, names that changed while no watch could answer (the last response
	// was not ACKed yet); dirtyAll says everything must be looked at again.
	dirty    map[string]map[string]struct{}
	dirtyAll map[string]bool
	// prevList is the subscription of the previous watch of each type; subsChanged says whether
	// the current watch's subscription differs from it.
	prevList    map[string][]string
	subsChanged map[string]bool
	// indexed is what the server's indexes hold for this connection (guarded by Server.mu), and
	// indexedList the request's name list it was built from.
	indexed     map[string]map[string]struct{}
	indexedList map[string][]string
	indexedWild map[string]bool
}

func (c *conn) statusOf(typeURL string) *typeStatus {
	st := c.status[typeURL]
	if st == nil {
		st = &typeStatus{}
		c.status[typeURL] = st
	}
	return st
}

// watch is one open request of one type on one stream; it answers at most once.
type watch struct {
	c        *conn
	typeURL  string
	sreq     *discovery.DiscoveryRequest
	dreq     *discovery.DeltaDiscoveryRequest
	sub      cache.Subscription
	sch      chan cache.Response
	dch      chan cache.DeltaResponse
	names    []string
	wildcard bool
	fired    bool
	closed   bool
	// initial is true until the watch is first evaluated.
	initial bool
}

func connKey(delta bool, id int64) string {
	if delta {
		return "delta-" + strconv.FormatInt(id, 10)
	}
	return "sotw-" + strconv.FormatInt(id, 10)
}

func (s *Server) openConn(ctx context.Context, delta bool, id int64) {
	c := &conn{
		id: connKey(delta, id), delta: delta, connectedAt: time.Now(), done: make(chan struct{}),
		watches: map[string]*watch{}, status: map[string]*typeStatus{},
		dirty: map[string]map[string]struct{}{}, dirtyAll: map[string]bool{}, prevList: map[string][]string{}, subsChanged: map[string]bool{},
		indexed: map[string]map[string]struct{}{}, indexedList: map[string][]string{}, indexedWild: map[string]bool{},
	}
	if idn, tlsConn, err := s.authenticate(ctx); tlsConn {
		c.identity, c.authErr = idn, err
	}
	s.mu.Lock()
	s.conns[c.id] = c
	s.mu.Unlock()
}

func (s *Server) closeConn(delta bool, id int64) {
	key := connKey(delta, id)
	s.mu.Lock()
	c := s.conns[key]
	delete(s.conns, key)
	if c != nil {
		if c.lastReq != nil {
			delete(s.reqConn, c.lastReq)
		}
		for t := range c.indexed {
			s.index(c, t, nil, false)
		}
	}
	s.mu.Unlock()
	if c == nil {
		return
	}
	close(c.done)
	c.mu.Lock()
	registered := c.proxy != nil
	typ := ""
	if c.proxy != nil {
		typ = c.proxy.Type
	}
	c.mu.Unlock()
	if registered {
		s.g.ConnectedProxies.DeleteObject(c.id)
		s.metrics.clients(typ, -1)
		s.log.Info("xDS client disconnected", zap.String("conn", c.id))
	}
}

// onRequest records which stream a request came from, registers the proxy on its first request,
// and keeps ACK/NACK state.
func (s *Server) onRequest(delta bool, id int64, req any, node *core.Node, typeURL, nonce string, errDetail *rpcstatus.Status) error {
	key := connKey(delta, id)
	s.mu.Lock()
	c := s.conns[key]
	if c != nil {
		if c.lastReq != nil {
			delete(s.reqConn, c.lastReq)
		}
		c.lastReq = req
		s.reqConn[req] = c
	}
	s.mu.Unlock()
	if c == nil {
		return status.Errorf(codes.Internal, "unknown stream %s", key)
	}
	c.mu.Lock()
	var newProxy *collections.ConnectedProxy
	if c.proxy == nil {
		if node == nil {
			c.mu.Unlock()
			return status.Error(codes.InvalidArgument, "the first request of a stream must carry the node")
		}
		cp, err := ProxyFromNode(c.id, node)
		if err != nil {
			c.mu.Unlock()
			s.metrics.RejectedNodes.Inc()
			s.log.Warn("rejected xDS client", zap.String("conn", c.id), zap.String("node", node.GetId()), zap.Error(err))
			return status.Error(codes.InvalidArgument, err.Error())
		}
		if err := s.authorize(c, cp); err != nil {
			c.mu.Unlock()
			s.metrics.RejectedNodes.Inc()
			s.log.Warn("refused xDS client", zap.String("conn", c.id), zap.String("node", node.GetId()), zap.Error(err))
			return err
		}
		c.proxy = &cp
		newProxy = &cp
	}
	st := c.statusOf(typeURL)
	switch {
	case errDetail != nil:
		st.LastError = errDetail.GetMessage()
		st.NACKs++
		s.metrics.NACKs.WithLabelValues(shortType(typeURL)).Inc()
		s.log.Warn("xDS client rejected a response", zap.String("conn", c.id), zap.String("node", c.proxy.ID),
			zap.String("type", shortType(typeURL)), zap.String("nonce", nonce), zap.String("error", errDetail.GetMessage()))
	case nonce != "" && nonce == st.SentNonce:
		st.AckedNonce = nonce
		st.AckedVersion = st.SentVersion
		st.LastError = ""
	}
	c.mu.Unlock()
	if newProxy != nil {
		s.g.ConnectedProxies.UpdateObject(*newProxy)
		s.metrics.clients(newProxy.Type, 1)
		s.log.Info("xDS client connected", zap.String("conn", c.id), zap.String("node", newProxy.ID),
			zap.String("namespace", newProxy.Namespace), zap.String("generator", newProxy.Generator))
	}
	return nil
}

// authorize checks, on an authenticated (TLS) stream, that the identity is from this trust
// domain and that the namespace the proxy claims is its identity's.
func (s *Server) authorize(c *conn, cp collections.ConnectedProxy) error {
	if c.authErr != nil {
		return status.Error(codes.Unauthenticated, c.authErr.Error())
	}
	if c.identity == nil {
		return nil // the plaintext port, trusted by where it listens
	}
	if s.trustDomain != "" && c.identity.TrustDomain != s.trustDomain {
		return status.Errorf(codes.PermissionDenied, "identity %s is not in trust domain %s", c.identity, s.trustDomain)
	}
	if c.identity.Namespace != cp.Namespace {
		return status.Errorf(codes.PermissionDenied, "identity %s may not act as a proxy in namespace %s", c.identity, cp.Namespace)
	}
	return nil
}

// SetTrustDomain sets the trust domain authenticated identities must belong to.
func (s *Server) SetTrustDomain(td string) { s.trustDomain = td }

func (s *Server) takeConn(req any) *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reqConn[req]
}

// CreateWatch implements cache.ConfigWatcher for state-of-the-world streams.
func (s *Server) CreateWatch(req *cache.Request, sub cache.Subscription, ch chan cache.Response) (func(), error) {
	c := s.takeConn(req)
	if c == nil {
		return nil, status.Error(codes.Internal, "request from an unknown stream")
	}
	w := &watch{c: c, typeURL: req.GetTypeUrl(), sreq: req, sub: sub, sch: ch, initial: true,
		names: req.GetResourceNames(), wildcard: sub.IsWildcard()}
	return s.addWatch(w), nil
}

// CreateDeltaWatch implements cache.ConfigWatcher for delta streams.
func (s *Server) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, ch chan cache.DeltaResponse) (func(), error) {
	c := s.takeConn(req)
	if c == nil {
		return nil, status.Error(codes.Internal, "request from an unknown stream")
	}
	// An ACK changes no subscription: keep the previous name list rather than sort it again.
	var names []string
	c.mu.Lock()
	if len(req.GetResourceNamesSubscribe()) == 0 && len(req.GetResourceNamesUnsubscribe()) == 0 {
		names = c.prevList[req.GetTypeUrl()]
	}
	c.mu.Unlock()
	if names == nil {
		names = collections.SortedKeys(sub.SubscribedResources())
	}
	w := &watch{c: c, typeURL: req.GetTypeUrl(), dreq: req, sub: sub, dch: ch, initial: true,
		names: names, wildcard: sub.IsWildcard()}
	return s.addWatch(w), nil
}

// Fetch implements cache.ConfigFetcher; krteds serves streams only.
func (s *Server) Fetch(context.Context, *cache.Request) (cache.Response, error) {
	return nil, errors.New("krteds does not serve REST xDS")
}

// index records (with s.mu held) that c subscribes to names (and to everything, if wildcard) of
// typeURL; nil names removes the connection from the type's indexes.
func (s *Server) index(c *conn, typeURL string, names []string, wildcard bool) {
	if names != nil && c.indexedList[typeURL] != nil && slices.Equal(c.indexedList[typeURL], names) && c.indexedWild[typeURL] == wildcard {
		return // the usual ACK: same names as before
	}
	if names != nil {
		c.indexedList[typeURL] = names
		c.indexedWild[typeURL] = wildcard
	} else {
		delete(c.indexedList, typeURL)
		delete(c.indexedWild, typeURL)
	}
	byName := s.byName[typeURL]
	if byName == nil {
		byName = map[string]map[*conn]struct{}{}
		s.byName[typeURL] = byName
	}
	next := make(map[string]struct{}, len(names))
	for _, n := range names {
		next[n] = struct{}{}
	}
	for n := range c.indexed[typeURL] {
		if _, keep := next[n]; !keep {
			delete(byName[n], c)
			if len(byName[n]) == 0 {
				delete(byName, n)
			}
		}
	}
	for n := range next {
		if _, had := c.indexed[typeURL][n]; !had {
			if byName[n] == nil {
				byName[n] = map[*conn]struct{}{}
			}
			byName[n][c] = struct{}{}
		}
	}
	for _, m := range []map[string]map[*conn]struct{}{s.byType, s.wild} {
		if m[typeURL] == nil {
			m[typeURL] = map[*conn]struct{}{}
		}
	}
	if names == nil && !wildcard {
		delete(c.indexed, typeURL)
		delete(s.byType[typeURL], c)
		delete(s.wild[typeURL], c)
		return
	}
	c.indexed[typeURL] = next
	s.byType[typeURL][c] = struct{}{}
	if wildcard {
		s.wild[typeURL][c] = struct{}{}
	} else {
		delete(s.wild[typeURL], c)
	}
}

func (s *Server) addWatch(w *watch) func() {
	s.mu.Lock()
	if _, open := s.conns[w.c.id]; open {
		names := w.names
		if names == nil {
			names = []string{}
		}
		s.index(w.c, w.typeURL, names, w.wildcard)
	}
	s.mu.Unlock()
	w.c.mu.Lock()
	w.c.watches[w.typeURL] = w
	s.evaluateLocked(w, map[string]struct{}{})
	w.c.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { s.removeWatch(w) }) }
}

func (s *Server) removeWatch(w *watch) {
	w.c.mu.Lock()
	w.closed = true
	if w.c.watches[w.typeURL] == w {
		delete(w.c.watches, w.typeURL)
	}
	w.c.mu.Unlock()
}

// evaluateNames looks at names on every connection subscribed to them (or to everything): an
// open watch answers, otherwise the names are kept for the connection's next request.
func (s *Server) evaluateNames(typeURL string, names map[string]struct{}) {
	s.mu.Lock()
	cs := map[*conn]map[string]struct{}{}
	for n := range names {
		for c := range s.byName[typeURL][n] {
			if cs[c] == nil {
				cs[c] = map[string]struct{}{}
			}
			cs[c][n] = struct{}{}
		}
	}
	for c := range s.wild[typeURL] {
		cs[c] = names
	}
	s.mu.Unlock()
	for c, only := range cs {
		s.touch(c, typeURL, only)
	}
}

// evaluateType looks at changed names of a type: every subscriber of a full-state type looks at
// everything.
func (s *Server) evaluateType(typeURL string, names map[string]struct{}) {
	if !fullState(typeURL) {
		s.evaluateNames(typeURL, names)
		return
	}
	s.mu.Lock()
	cs := make([]*conn, 0, len(s.byType[typeURL]))
	for c := range s.byType[typeURL] {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		s.touch(c, typeURL, nil)
	}
}

// touch evaluates c's open watch of typeURL for only (nil: everything), or remembers them.
func (s *Server) touch(c *conn, typeURL string, only map[string]struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if w := c.watches[typeURL]; w != nil {
		s.evaluateLocked(w, only)
		return
	}
	c.markDirty(typeURL, only)
}

func (c *conn) markDirty(typeURL string, only map[string]struct{}) {
	if only == nil {
		c.dirtyAll[typeURL] = true
		return
	}
	d := c.dirty[typeURL]
	if d == nil {
		d = map[string]struct{}{}
		c.dirty[typeURL] = d
	}
	for n := range only {
		d[n] = struct{}{}
	}
}

func (s *Server) evaluateConn(id string) {
	s.mu.Lock()
	c := s.conns[id]
	s.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for t := range c.status {
		if w := c.watches[t]; w != nil {
			s.evaluateLocked(w, nil)
		} else {
			c.dirtyAll[t] = true
		}
	}
}

func (s *Server) evaluateAll() {
	s.mu.Lock()
	cs := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		c.mu.Lock()
		for _, w := range c.watches {
			s.evaluateLocked(w, nil)
		}
		c.mu.Unlock()
	}
}

// desired resolves names (nil: everything the watch asks for). pending names will exist later.
func (s *Server) desired(w *watch, p *collections.Proxy, cp collections.ConnectedProxy, only map[string]struct{}) (map[string]*collections.Resource, bool) {
	out := map[string]*collections.Resource{}
	pending := false
	resolve := func(n string) {
		if w.typeURL == transforms.TypeCLA {
			r := s.res.cla(p, cp, n)
			if r.pending {
				pending = true
				return
			}
			out[n] = r.res
			return
		}
		if r := s.res.named(p, cp, w.typeURL, n); r != nil {
			out[n] = r
		}
	}
	if only != nil {
		subscribed := w.sub.SubscribedResources()
		for n := range only {
			if _, ok := subscribed[n]; ok {
				resolve(n)
			}
		}
		if !w.wildcard {
			return out, pending
		}
	}
	if w.wildcard {
		for _, r := range s.res.wildcard(p, cp, w.typeURL) {
			if only != nil {
				if _, ok := only[r.Name]; !ok {
					continue
				}
			}
			r := r
			out[r.Name] = &r
		}
	}
	if only == nil {
		for _, n := range w.names {
			if n != "*" {
				resolve(n)
			}
		}
	}
	return out, pending
}

// evaluateLocked (c.mu held) answers the watch if what the proxy should have differs from what
// it was sent. It looks only at the names in only (nil: everything); a watch that already
// answered keeps them as dirty for its successor. Before the graph has synced nothing is sent.
func (s *Server) evaluateLocked(w *watch, only map[string]struct{}) {
	c := w.c
	if w.closed || c.proxy == nil {
		return
	}
	if w.fired || !s.synced.Load() {
		c.markDirty(w.typeURL, only)
		return
	}
	p := s.g.Proxies.GetKey(c.id)
	st := c.statusOf(w.typeURL)
	force := !st.responded || (w.typeURL == transforms.TypeCLA && c.forceEDS)
	if w.initial {
		w.initial = false
		prev := c.prevList[w.typeURL]
		same := prev != nil && slices.Equal(prev, w.names)
		c.prevList[w.typeURL] = w.names
		c.subsChanged[w.typeURL] = !same
		if !force && !c.dirtyAll[w.typeURL] && !w.wildcard {
			// Only what changed since the last answer, and names new to the subscription.
			merged := make(map[string]struct{}, len(only)+len(c.dirty[w.typeURL]))
			for n := range only {
				merged[n] = struct{}{}
			}
			for n := range c.dirty[w.typeURL] {
				merged[n] = struct{}{}
			}
			if !same {
				old := make(map[string]struct{}, len(prev))
				for _, n := range prev {
					old[n] = struct{}{}
				}
				for _, n := range w.names {
					if _, ok := old[n]; !ok {
						merged[n] = struct{}{}
					}
				}
			}
			only = merged
		} else {
			only = nil
		}
		delete(c.dirty, w.typeURL)
		delete(c.dirtyAll, w.typeURL)
	}
	full := fullState(w.typeURL)
	if force || full {
		only = nil
	}
	want, pending := s.desired(w, p, *c.proxy, only)
	returned := w.sub.ReturnedResources()

	var changed []string
	for n, r := range want {
		if v, ok := returned[n]; !ok || v != r.Version {
			changed = append(changed, n)
		}
	}
	slices.Sort(changed)
	var removed []string
	if only == nil {
		subscribed := w.sub.SubscribedResources()
		for n := range returned {
			if _, ok := want[n]; ok {
				continue
			}
			_, sub := subscribed[n]
			if w.typeURL == transforms.TypeCLA && sub {
				continue // pending: keep what the client has
			}
			if w.wildcard || sub || !w.delta() {
				removed = append(removed, n)
			}
		}
		slices.Sort(removed)
	}
	if len(changed) == 0 && len(removed) == 0 && !force {
		return
	}
	if len(want) == 0 && pending && !st.responded {
		return // wait for the first real answer rather than send nothing
	}
	var send []string
	if full || (force && !w.delta()) {
		send = collections.SortedKeys(want)
	} else {
		send = changed
	}
	if w.delta() {
		s.respondDelta(w, st, want, send, removed, returned)
	} else {
		s.respondSotw(w, st, want, send, removed, returned)
	}
	if w.typeURL == transforms.TypeCLA {
		c.forceEDS = false
	}
	if w.typeURL == transforms.TypeCluster {
		// Envoy re-requests EDS after CDS and waits for an answer before warming clusters;
		// answer it even if nothing changed (as istiod does).
		c.forceEDS = true
	}
}

func (w *watch) delta() bool { return w.dch != nil }

// responseVersion is a content hash of the resources of a response: the same resources give the
// same version, whichever krteds instance computes it.
func responseVersion(want map[string]*collections.Resource, send, removed []string) string {
	h := xxhash.New()
	for _, n := range send {
		_, _ = h.WriteString(n)
		_, _ = h.WriteString("\x00")
		_, _ = h.WriteString(want[n].Version)
		_, _ = h.WriteString("\x00")
	}
	for _, n := range removed {
		_, _ = h.WriteString("-")
		_, _ = h.WriteString(n)
		_, _ = h.WriteString("\x00")
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

func (s *Server) respondSotw(w *watch, st *typeStatus, want map[string]*collections.Resource, send, removed []string, returned map[string]string) {
	version := responseVersion(want, send, removed)
	resp := &discovery.DiscoveryResponse{VersionInfo: version, TypeUrl: w.typeURL}
	var next map[string]string
	if fullState(w.typeURL) {
		next = make(map[string]string, len(send))
	} else {
		next = nextReturned(w, returned, removed, len(send))
	}
	bytes := 0
	for _, n := range send {
		r := want[n]
		resp.Resources = append(resp.Resources, &anypb.Any{TypeUrl: r.TypeURL, Value: r.Body})
		next[n] = r.Version
		bytes += len(r.Body)
	}
	s.sent(w, st, version, send, returned, bytes)
	deliver(w.sch, cache.Response(&sotwResponse{req: w.sreq, resp: resp, returned: next, ctx: context.Background()}), w.c.done,
		func() { s.metrics.PushErrors.WithLabelValues(shortType(w.typeURL)).Inc() })
}

// nextReturned is the map of versions the client holds after a response, before the sent
// resources are added. When the subscription is unchanged and nothing is removed, the previous
// map is this server's own from the previous response of this stream and type (nobody else
// writes it) and is updated in place, which keeps an ACK cheap for clients that subscribe to
// thousands of resources; otherwise it is a copy without the names no longer subscribed.
func nextReturned(w *watch, returned map[string]string, removed []string, extra int) map[string]string {
	if returned != nil && !w.c.subsChanged[w.typeURL] && len(removed) == 0 {
		return returned
	}
	next := make(map[string]string, len(returned)+extra)
	subscribed := w.sub.SubscribedResources()
	for n, v := range returned {
		if _, ok := subscribed[n]; ok || w.wildcard {
			next[n] = v
		}
	}
	for _, n := range removed {
		delete(next, n)
	}
	return next
}

// deliver hands a response to the stream without blocking the caller: the channel has room for
// one response per type, and a watch answers at most once, so waiting is rare; when it happens a
// goroutine waits, until the stream ends (counted as a push error).
func deliver[T any](ch chan T, r T, done <-chan struct{}, dropped func()) {
	select {
	case ch <- r:
	default:
		go func() {
			select {
			case ch <- r:
			case <-done:
				dropped()
			}
		}()
	}
}

func (s *Server) respondDelta(w *watch, st *typeStatus, want map[string]*collections.Resource, send, removed []string, returned map[string]string) {
	version := responseVersion(want, send, removed)
	resp := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: version, TypeUrl: w.typeURL, RemovedResources: removed}
	next := nextReturned(w, returned, removed, len(send))
	bytes := 0
	for _, n := range send {
		r := want[n]
		resp.Resources = append(resp.Resources, &discovery.Resource{
			Name: n, Version: r.Version, Resource: &anypb.Any{TypeUrl: r.TypeURL, Value: r.Body},
		})
		next[n] = r.Version
		bytes += len(r.Body)
	}
	s.sent(w, st, version, send, returned, bytes)
	deliver(w.dch, cache.DeltaResponse(&deltaResponse{req: w.dreq, resp: resp, returned: next, ctx: context.Background()}), w.c.done,
		func() { s.metrics.PushErrors.WithLabelValues(shortType(w.typeURL)).Inc() })
}

// sent records a response on the watch and the connection.
func (s *Server) sent(w *watch, st *typeStatus, version string, send []string, returned map[string]string, bytes int) {
	w.fired = true
	st.responded = true
	st.SentVersion = version
	st.SentTime = time.Now()
	st.Responses++
	s.metrics.pushed(w.typeURL, bytes)
	s.observeConvergence(w.typeURL, send, returned)
}

// onResponse records the nonce a response went out with.
func (s *Server) onResponse(delta bool, id int64, typeURL, nonce string) {
	s.mu.Lock()
	c := s.conns[connKey(delta, id)]
	s.mu.Unlock()
	if c == nil {
		return
	}
	c.mu.Lock()
	c.statusOf(typeURL).SentNonce = nonce
	c.mu.Unlock()
}

// ProxyFromNode parses an Envoy node as istiod does.
func ProxyFromNode(connID string, node *core.Node) (collections.ConnectedProxy, error) {
	md := collections.NodeMetadata{}
	fields := node.GetMetadata().GetFields()
	str := func(k string) (string, error) {
		v, ok := fields[k]
		if !ok {
			return "", nil
		}
		sv, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return "", fmt.Errorf("node metadata %s must be a string", k)
		}
		return sv.StringValue, nil
	}
	var err error
	for k, dst := range map[string]*string{
		"NAMESPACE": &md.Namespace, "CLUSTER_ID": &md.ClusterID, "NETWORK": &md.Network,
		"NODE_NAME": &md.NodeName, "GENERATOR": &md.Generator,
	} {
		if *dst, err = str(k); err != nil {
			return collections.ConnectedProxy{}, err
		}
	}
	if v, ok := fields["LABELS"]; ok {
		sv := v.GetStructValue()
		if sv == nil {
			return collections.ConnectedProxy{}, errors.New("node metadata LABELS must be a map of strings")
		}
		md.Labels = map[string]string{}
		for k, lv := range sv.GetFields() {
			s, ok := lv.GetKind().(*structpb.Value_StringValue)
			if !ok {
				return collections.ConnectedProxy{}, fmt.Errorf("node metadata LABELS[%s] must be a string", k)
			}
			md.Labels[k] = s.StringValue
		}
	}
	loc := collections.Locality{Region: node.GetLocality().GetRegion(), Zone: node.GetLocality().GetZone(), Subzone: node.GetLocality().GetSubZone()}
	return collections.ParseProxy(connID, node.GetId(), md, loc)
}

// shortType is the last segment of a type URL ("ClusterLoadAssignment").
func shortType(typeURL string) string {
	if i := strings.LastIndex(typeURL, "."); i >= 0 {
		return typeURL[i+1:]
	}
	return typeURL
}

// ConnStatus is the protocol state of one connected stream, for /debug/syncz and /debug/adsz.
type ConnStatus struct {
	ConnID      string                      `json:"connectionId"`
	Delta       bool                        `json:"delta"`
	ConnectedAt time.Time                   `json:"connectedAt"`
	Proxy       *collections.ConnectedProxy `json:"proxy,omitempty"`
	Watches     map[string][]string         `json:"watches"`
	Types       map[string]typeStatus       `json:"resources"`
}

// Status lists every stream, ordered by connection id.
func (s *Server) Status() []ConnStatus {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	out := make([]ConnStatus, 0, len(conns))
	for _, c := range conns {
		c.mu.Lock()
		cs := ConnStatus{ConnID: c.id, Delta: c.delta, ConnectedAt: c.connectedAt, Watches: map[string][]string{}, Types: map[string]typeStatus{}}
		if c.proxy != nil {
			p := *c.proxy
			cs.Proxy = &p
		}
		for t, w := range c.watches {
			names := slices.Clone(w.names)
			if w.wildcard && len(names) == 0 {
				names = []string{"*"}
			}
			cs.Watches[t] = names
		}
		for t, st := range c.status {
			cs.Types[t] = *st
		}
		c.mu.Unlock()
		out = append(out, cs)
	}
	slices.SortFunc(out, func(a, b ConnStatus) int { return strings.Compare(a.ConnID, b.ConnID) })
	return out
}
