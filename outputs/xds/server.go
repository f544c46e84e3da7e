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
	g         *graphs.Graph
	clusterID string
	log       *zap.Logger
	metrics   *Metrics
	res       resolver

	synced atomic.Bool

	// changedAt is when the input change behind each resource's latest version was observed,
	// for the convergence-time metric.
	changedMu sync.Mutex
	changedAt map[string]time.Time

	mu      sync.Mutex
	conns   map[string]*conn
	reqConn map[any]*conn
	// byName indexes open watches by type and subscribed name; byType lists every open watch of
	// a type (for wildcard subscriptions and full-state types).
	byName map[string]map[string]map[*watch]struct{}
	byType map[string]map[*watch]struct{}
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
		byName:    map[string]map[string]map[*watch]struct{}{},
		byType:    map[string]map[*watch]struct{}{},
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
			s.evaluateType(typeURL)
		}, false)
	}
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

	mu       sync.Mutex
	proxy    *collections.ConnectedProxy
	lastReq  any
	watches  map[string]*watch
	status   map[string]*typeStatus
	forceEDS bool
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
}

func connKey(delta bool, id int64) string {
	if delta {
		return "delta-" + strconv.FormatInt(id, 10)
	}
	return "sotw-" + strconv.FormatInt(id, 10)
}

func (s *Server) openConn(delta bool, id int64) {
	c := &conn{
		id: connKey(delta, id), delta: delta, connectedAt: time.Now(), done: make(chan struct{}),
		watches: map[string]*watch{}, status: map[string]*typeStatus{},
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
	if c != nil && c.lastReq != nil {
		delete(s.reqConn, c.lastReq)
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
	w := &watch{c: c, typeURL: req.GetTypeUrl(), sreq: req, sub: sub, sch: ch,
		names: collections.SortedKeys(sub.SubscribedResources()), wildcard: sub.IsWildcard()}
	return s.addWatch(w), nil
}

// CreateDeltaWatch implements cache.ConfigWatcher for delta streams.
func (s *Server) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, ch chan cache.DeltaResponse) (func(), error) {
	c := s.takeConn(req)
	if c == nil {
		return nil, status.Error(codes.Internal, "request from an unknown stream")
	}
	w := &watch{c: c, typeURL: req.GetTypeUrl(), dreq: req, sub: sub, dch: ch,
		names: collections.SortedKeys(sub.SubscribedResources()), wildcard: sub.IsWildcard()}
	return s.addWatch(w), nil
}

// Fetch implements cache.ConfigFetcher; krteds serves streams only.
func (s *Server) Fetch(context.Context, *cache.Request) (cache.Response, error) {
	return nil, errors.New("krteds does not serve REST xDS")
}

func (s *Server) addWatch(w *watch) func() {
	s.mu.Lock()
	if s.byType[w.typeURL] == nil {
		s.byType[w.typeURL] = map[*watch]struct{}{}
	}
	s.byType[w.typeURL][w] = struct{}{}
	names := s.byName[w.typeURL]
	if names == nil {
		names = map[string]map[*watch]struct{}{}
		s.byName[w.typeURL] = names
	}
	for _, n := range w.names {
		if names[n] == nil {
			names[n] = map[*watch]struct{}{}
		}
		names[n][w] = struct{}{}
	}
	s.mu.Unlock()
	w.c.mu.Lock()
	w.c.watches[w.typeURL] = w
	w.c.mu.Unlock()
	s.evaluate(w)
	var once sync.Once
	return func() { once.Do(func() { s.removeWatch(w) }) }
}

func (s *Server) removeWatch(w *watch) {
	s.mu.Lock()
	delete(s.byType[w.typeURL], w)
	for _, n := range w.names {
		if set := s.byName[w.typeURL][n]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(s.byName[w.typeURL], n)
			}
		}
	}
	s.mu.Unlock()
	w.c.mu.Lock()
	w.closed = true
	if w.c.watches[w.typeURL] == w {
		delete(w.c.watches, w.typeURL)
	}
	w.c.mu.Unlock()
}

func (s *Server) evaluateNames(typeURL string, names map[string]struct{}) {
	s.mu.Lock()
	ws := map[*watch]struct{}{}
	for n := range names {
		for w := range s.byName[typeURL][n] {
			ws[w] = struct{}{}
		}
	}
	for w := range s.byType[typeURL] {
		if w.wildcard {
			ws[w] = struct{}{}
		}
	}
	s.mu.Unlock()
	for w := range ws {
		s.evaluate(w)
	}
}

func (s *Server) evaluateType(typeURL string) {
	s.mu.Lock()
	ws := make([]*watch, 0, len(s.byType[typeURL]))
	for w := range s.byType[typeURL] {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		s.evaluate(w)
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
	ws := make([]*watch, 0, len(c.watches))
	for _, w := range c.watches {
		ws = append(ws, w)
	}
	c.mu.Unlock()
	for _, w := range ws {
		s.evaluate(w)
	}
}

func (s *Server) evaluateAll() {
	s.mu.Lock()
	var ws []*watch
	for _, set := range s.byType {
		for w := range set {
			ws = append(ws, w)
		}
	}
	s.mu.Unlock()
	for _, w := range ws {
		s.evaluate(w)
	}
}

// desired resolves what the watch's subscription asks for. pending names will exist later.
func (s *Server) desired(w *watch, p *collections.Proxy, cp collections.ConnectedProxy) (map[string]*collections.Resource, bool) {
	out := map[string]*collections.Resource{}
	pending := false
	if w.wildcard {
		for _, r := range s.res.wildcard(cp, w.typeURL) {
			r := r
			out[r.Name] = &r
		}
	}
	for _, n := range w.names {
		if n == "*" {
			continue
		}
		if w.typeURL == transforms.TypeCLA {
			r := s.res.cla(p, n)
			if r.pending {
				pending = true
				continue
			}
			out[n] = r.res
			continue
		}
		if r := s.res.named(p, cp, w.typeURL, n); r != nil {
			out[n] = r
		}
	}
	return out, pending
}

// evaluate answers the watch if what the proxy should have differs from what it was sent.
func (s *Server) evaluate(w *watch) {
	if !s.synced.Load() {
		return
	}
	c := w.c
	p := s.g.Proxies.GetKey(c.id)
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.fired || w.closed || c.proxy == nil {
		return
	}
	want, pending := s.desired(w, p, *c.proxy)
	st := c.statusOf(w.typeURL)
	force := !st.responded || (w.typeURL == transforms.TypeCLA && c.forceEDS)
	returned := w.sub.ReturnedResources()

	var changed []string
	for n, r := range want {
		if v, ok := returned[n]; !ok || v != r.Version {
			changed = append(changed, n)
		}
	}
	slices.Sort(changed)
	var removed []string
	for n := range returned {
		if _, ok := want[n]; ok {
			continue
		}
		_, subscribed := w.sub.SubscribedResources()[n]
		if w.typeURL == transforms.TypeCLA && subscribed {
			continue // pending: keep what the client has
		}
		if w.wildcard || subscribed || !w.delta() {
			removed = append(removed, n)
		}
	}
	slices.Sort(removed)
	full := fullState(w.typeURL)
	if len(changed) == 0 && len(removed) == 0 && !force {
		return
	}
	if len(want) == 0 && pending && !st.responded {
		return // wait for the first real answer rather than send nothing
	}
	version := stateVersion(want)
	var send []string
	if full || (force && !w.delta()) {
		send = collections.SortedKeys(want)
	} else {
		send = changed
	}
	if w.delta() {
		if len(send) == 0 && len(removed) == 0 && st.responded && !force {
			return
		}
		s.respondDelta(w, st, want, send, removed, returned, version)
	} else {
		if !full && len(send) == 0 && st.responded && !force {
			return
		}
		s.respondSotw(w, st, want, send, returned, version)
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

// stateVersion is a content hash of a resource set: same resources, same version, whichever
// krteds instance computes it.
func stateVersion(rs map[string]*collections.Resource) string {
	h := xxhash.New()
	for _, n := range collections.SortedKeys(rs) {
		_, _ = h.WriteString(n)
		_, _ = h.WriteString("\x00")
		_, _ = h.WriteString(rs[n].Version)
		_, _ = h.WriteString("\x00")
	}
	return strconv.FormatUint(h.Sum64(), 16)
}

func (s *Server) respondSotw(w *watch, st *typeStatus, want map[string]*collections.Resource, send []string, returned map[string]string, version string) {
	resp := &discovery.DiscoveryResponse{VersionInfo: version, TypeUrl: w.typeURL}
	next := map[string]string{}
	if !fullState(w.typeURL) {
		subscribed := w.sub.SubscribedResources()
		for n, v := range returned {
			if _, ok := subscribed[n]; ok {
				if _, still := want[n]; still {
					next[n] = v
				}
			}
		}
	}
	bytes := 0
	for _, n := range send {
		r := want[n]
		resp.Resources = append(resp.Resources, &anypb.Any{TypeUrl: r.TypeURL, Value: r.Body})
		next[n] = r.Version
		bytes += len(r.Body)
	}
	w.fired = true
	st.responded = true
	st.SentVersion = version
	st.SentTime = time.Now()
	st.Responses++
	s.metrics.pushed(w.typeURL, bytes)
	s.observeConvergence(w.typeURL, send, returned)
	r := &sotwResponse{req: w.sreq, resp: resp, returned: next, ctx: context.Background()}
	select {
	case w.sch <- r:
	default:
		go func() {
			select {
			case w.sch <- r:
			case <-w.c.done:
				s.metrics.PushErrors.WithLabelValues(shortType(w.typeURL)).Inc()
			}
		}()
	}
}

func (s *Server) respondDelta(w *watch, st *typeStatus, want map[string]*collections.Resource, send, removed []string, returned map[string]string, version string) {
	resp := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: version, TypeUrl: w.typeURL, RemovedResources: removed}
	next := map[string]string{}
	subscribed := w.sub.SubscribedResources()
	for n, v := range returned {
		_, sub := subscribed[n]
		if _, still := want[n]; still && (sub || w.wildcard) {
			next[n] = v
		}
	}
	bytes := 0
	for _, n := range send {
		r := want[n]
		resp.Resources = append(resp.Resources, &discovery.Resource{
			Name: n, Version: r.Version, Resource: &anypb.Any{TypeUrl: r.TypeURL, Value: r.Body},
		})
		next[n] = r.Version
		bytes += len(r.Body)
	}
	w.fired = true
	st.responded = true
	st.SentVersion = version
	st.SentTime = time.Now()
	st.Responses++
	s.metrics.pushed(w.typeURL, bytes)
	s.observeConvergence(w.typeURL, send, returned)
	r := &deltaResponse{req: w.dreq, resp: resp, returned: next, ctx: context.Background()}
	select {
	case w.dch <- r:
	default:
		go func() {
			select {
			case w.dch <- r:
			case <-w.c.done:
				s.metrics.PushErrors.WithLabelValues(shortType(w.typeURL)).Inc()
			}
		}()
	}
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
