package xds

import "github.com/krteds/krteds/collections"

// Source is what the server serves from. It computes nothing per request: resolving a name is a
// lookup in what the source computed for the proxy's view, and the source says what changed.
type Source interface {
	// WaitUntilSynced blocks until the source has computed its initial state (false if stop
	// closes first). Nothing is answered before.
	WaitUntilSynced(stop <-chan struct{}) bool
	// Connect makes a connected proxy known to the source; Disconnect forgets it.
	Connect(p collections.ConnectedProxy)
	Disconnect(connID string)
	// View is what resolving names for a connection depends on; nil until the source has
	// computed it (a Change naming the connection follows).
	View(connID string) *collections.View
	// Resolve returns the resource of a type and name for proxies of view v. With a nil resource,
	// pending says whether it will exist once computed (a Change follows) or does not exist.
	Resolve(v *collections.View, typeURL, name string) (r *collections.Resource, pending bool)
	// List returns every resource of the type proxies of view v see, for wildcard subscriptions.
	List(v *collections.View, typeURL string) []*collections.Resource
	// Follows is the name whose changes may change the resource of a type and name besides its
	// own ("" for none): a Change naming it marks the name changed too. It is a pure function of
	// its arguments, called with the server's locks held.
	Follows(typeURL, name string) string
	// Subscribe calls f with every change, in order for each type.
	Subscribe(f func(collections.Change))
	// Holds reports whether some view is sent this version of the resource of a type and name
	// now (a delta client coming back with it holds what the server would send).
	Holds(typeURL, name string, version uint64) bool
}
