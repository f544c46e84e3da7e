package xds

import (
	"context"
	"strconv"
	"strings"

	"github.com/krteds/krteds/collections"
)

// Scope is what a debug caller may read: everything (a loopback caller, an identity of the
// system namespace), or the proxies of one namespace (another identity), as istiod's StatusGen
// and DebugGen decide.
type Scope struct {
	// All: every proxy and every page.
	All bool
	// Namespace is the namespace whose proxies a caller without All may read.
	Namespace string
}

// Everything is the scope of a trusted caller.
var Everything = Scope{All: true}

// Sees reports whether the scope covers the proxies of a namespace.
func (s Scope) Sees(namespace string) bool {
	return s.All || (s.Namespace != "" && s.Namespace == namespace)
}

func (s Scope) String() string {
	if s.All {
		return "everything"
	}
	return "namespace " + s.Namespace
}

// NamespacePages are the debug pages a caller outside the system namespace may read, and only
// for a proxy of its own namespace (istiod's activeNamespaceDebuggers, less ndsz which krteds
// does not serve).
var NamespacePages = map[string]bool{"config_dump": true, "edsz": true}

// ScopeOf is the scope of an authenticated identity: everything for the system namespace's, its
// own namespace for another.
func (s *Server) ScopeOf(id Identity) Scope {
	if s.systemNamespace != "" && id.Namespace == s.systemNamespace {
		return Everything
	}
	return Scope{Namespace: id.Namespace}
}

// Caller is who asks a debug page: its scope and, when the request came over xDS, the
// connection its proxyID was resolved to under that scope (the page shows that connection, not
// another one the same id would name).
type Caller struct {
	Scope  Scope
	ConnID string
}

type callerKey struct{}

// WithCaller is a request context carrying the caller of a debug page.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom is the caller a request context carries; without one, a page answers nothing.
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}

// FindProxy finds, among the connected proxies the scope sees, the one id names: a connection
// id, else a node id, else istiod's proxy ID (<pod>.<namespace>, the node id's third field).
// Where several connections match a node id or a proxy ID (a proxy reconnecting before its
// old stream closed), the latest wins. Only the one connection found is read.
func (s *Server) FindProxy(id string, scope Scope) (ConnStatus, bool) {
	if id == "" {
		return ConnStatus{}, false
	}
	s.mu.RLock()
	exact := s.conns[id]
	var all []*conn
	if exact == nil || !scope.All {
		all = make([]*conn, 0, len(s.conns))
		for _, c := range s.conns {
			all = append(all, c)
		}
	}
	s.mu.RUnlock()
	if exact != nil {
		if p := exact.connectedProxy(); p != nil && scope.Sees(p.Namespace) {
			return exact.status(s.names), true
		}
	}
	var best *conn
	bestLevel := 0
	for _, c := range all {
		p := c.connectedProxy()
		if p == nil || !scope.Sees(p.Namespace) {
			continue
		}
		level := 0
		switch id {
		case p.ID:
			level = 2
		case istioProxyID(p.ID):
			level = 1
		}
		if level == 0 {
			continue
		}
		if level > bestLevel || (level == bestLevel && connSeq(c.id) > connSeq(best.id)) {
			best, bestLevel = c, level
		}
	}
	if best == nil {
		return ConnStatus{}, false
	}
	return best.status(s.names), true
}

// connSeq is the sequence number of a connection id ("delta-12" → 12).
func connSeq(id string) int64 {
	n, _ := strconv.ParseInt(id[strings.LastIndexByte(id, '-')+1:], 10, 64)
	return n
}

// connectedProxy is the proxy the stream identified as (nil before its first request); it does
// not change once set.
func (c *conn) connectedProxy() *collections.ConnectedProxy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proxy
}
