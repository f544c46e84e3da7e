// Package xdsdebug answers the debug questions about krteds' xDS streams: istiod's
// /debug/syncz, /debug/adsz and their xDS forms (istio.io/debug/syncz, istio.io/debug/config_dump,
// istio.io/debug, which istioctl asks with --xds-address), and which proxy a debug caller names
// and may read (Scope). It reads the ADS server only through Streams.
package xdsdebug

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/admission"
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
func (d *Debug) ScopeOf(id admission.Identity) Scope {
	if d.systemNamespace != "" && id.Namespace == d.systemNamespace {
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

// FindProxy finds, among the connected proxies the scope sees, the one id names. The forms, the
// first that matches deciding:
//  1. a connection id of krteds ("sotw-12", "delta-3": /debug/connections);
//  2. a node id (sidecar~<ip>~<pod>.<namespace>~<namespace>.svc.<domain>);
//  3. istiod's proxy ID, the node id's third field: <pod>.<namespace>;
//  4. a part of it (a bare pod name, a Deployment's prefix such as "istio-ingressgateway"):
//     istiod's getProxyConnection takes the first connection whose id contains the string.
//     krteds takes it only when it names one proxy, and otherwise names the candidates.
//
// Where several connections match a node id or a proxy ID (a proxy reconnecting before its old
// stream closed), the latest wins. Proxies the scope does not see are never compared, so an
// answer never tells whether one exists. The error is a *ProxyLookupError.
func (d *Debug) FindProxy(id string, scope Scope) (ConnStatus, error) {
	if id == "" {
		return ConnStatus{}, &ProxyLookupError{ID: id}
	}
	var best *Proxy
	bestLevel := 0
	partOf := map[string]bool{} // the proxy IDs id is a part of (form 4)
	for _, p := range d.streams.Proxies() {
		if !scope.Sees(p.Namespace) {
			continue
		}
		if p.ConnID == id {
			best, bestLevel = &p, 4
			break
		}
		pid := istioProxyID(p.NodeID)
		level := 0
		switch {
		case id == p.NodeID:
			level = 3
		case id == pid:
			level = 2
		case strings.Contains(pid, id):
			level = 1
			partOf[pid] = true
		}
		if level == 0 || level < bestLevel {
			continue
		}
		if level > bestLevel || connSeq(p.ConnID) > connSeq(best.ConnID) {
			best, bestLevel = &p, level
		}
	}
	if best == nil {
		return ConnStatus{}, &ProxyLookupError{ID: id}
	}
	if bestLevel == 1 && len(partOf) > 1 {
		return ConnStatus{}, &ProxyLookupError{ID: id, Matches: collections.SortedKeys(partOf)}
	}
	st, ok := d.streams.Status(best.ConnID, true)
	if !ok {
		return ConnStatus{}, &ProxyLookupError{ID: id} // it has just gone
	}
	return st, nil
}

// ProxyLookupError says why a proxyID names no proxy: none the caller sees matches it, or it is
// a part of the proxy IDs of several.
type ProxyLookupError struct {
	ID string
	// Matches are the proxy IDs (<pod>.<namespace>) the id is a part of, when more than one.
	Matches []string
}

// maxListedMatches bounds the proxy IDs an ambiguous lookup's message lists.
const maxListedMatches = 10

func (e *ProxyLookupError) Error() string {
	if len(e.Matches) == 0 {
		return fmt.Sprintf("no connected proxy %q (proxyID takes a connection id, a node id, <pod>.<namespace>, "+
			"or a part of <pod>.<namespace> that names one proxy); with several krteds replicas it may be connected to another", clip(e.ID))
	}
	listed := e.Matches[:min(len(e.Matches), maxListedMatches)]
	more := ""
	if n := len(e.Matches) - len(listed); n > 0 {
		more = fmt.Sprintf(" and %d more", n)
	}
	return fmt.Sprintf("proxyID %q is a part of %d proxies' <pod>.<namespace>: %s%s; name one by its <pod>.<namespace>, node id or connection id",
		clip(e.ID), len(e.Matches), strings.Join(listed, ", "), more)
}

// ProxyLookupStatus is the status a debug page answers a FindProxy error with: 404 for no
// proxy, 409 for several.
func ProxyLookupStatus(err error) int {
	var e *ProxyLookupError
	switch {
	case !errors.As(err, &e):
		return http.StatusInternalServerError
	case len(e.Matches) > 0:
		return http.StatusConflict
	}
	return http.StatusNotFound
}

// connSeq is the sequence number of a connection id ("delta-12" → 12).
func connSeq(id string) int64 {
	n, _ := strconv.ParseInt(id[strings.LastIndexByte(id, '-')+1:], 10, 64)
	return n
}

// clip shortens client-supplied text to 256 bytes, saying how much was cut.
func clip(s string) string { return collections.Truncate(s, 256) }
