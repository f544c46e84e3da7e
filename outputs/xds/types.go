package xds

import resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

// typ is one of the resource types krteds serves; only these get per-stream state.
type typ uint8

const (
	tCluster typ = iota
	tEndpoint
	tListener
	tRoute
	// tLbEndpoint is LEDS (delta streams only).
	tLbEndpoint
	numTypes
)

// typeURLs in the order responses of several types go out: clusters before their endpoints,
// listeners before their routes, as istiod pushes them; LEDS endpoints after the CLAs that name
// their collections.
var typeURLs = [...]string{resourcev3.ClusterType, resourcev3.EndpointType, resourcev3.ListenerType, resourcev3.RouteType, typeLbEndpoint}

// shortNames are the metric label values of the types; unknown is the one value for the rest.
var shortNames = [...]string{"Cluster", "ClusterLoadAssignment", "Listener", "RouteConfiguration", "LbEndpoint"}

// Each table has one entry per type: one that misses a type (or has one too many) does not
// compile (a negative or too large constant index).
var (
	_ = [1]struct{}{}[len(typeURLs)-int(numTypes)]
	_ = [1]struct{}{}[len(shortNames)-int(numTypes)]
)

func typeOf(url string) (typ, bool) {
	for t, u := range typeURLs {
		if u == url {
			return typ(t), true
		}
	}
	return 0, false
}

func (t typ) url() string   { return typeURLs[t] }
func (t typ) short() string { return shortNames[t] }

// fullState reports whether a state-of-the-world response of the type lists every resource the
// client has (absence means deletion): clusters and listeners. Endpoints and routes may be sent
// alone.
func (t typ) fullState() bool { return t == tCluster || t == tListener }

// legacyWildcard reports whether a first request of the type without names asks for everything.
func (t typ) legacyWildcard() bool { return t == tCluster || t == tListener }

// splittable reports whether a response of the type may go out in parts: any type on a delta
// stream but LEDS (a collection's members are held as a whole), and on state of the world the
// types whose response may list some resources only (endpoints and routes).
func (t typ) splittable(delta bool) bool { return t != tLbEndpoint && (delta || !t.fullState()) }
