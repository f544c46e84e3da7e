package eds

import "github.com/krteds/krteds/collections"

// Trace receives the decisions a CLA's plan makes about each endpoint: why one is left out, the
// gateways another is reached through, and where each sent one is placed (locality, priority,
// weights, health, tlsMode). The plans that build the served CLAs take a nil Trace, which
// records nothing; krteds explain plans the same CLA with one, so that what it says is what the
// plan did.
type Trace struct {
	// Left are the endpoints left out, by Endpoint.Key(), with the first rule that did.
	Left map[string]Exclusion
	// Via are the endpoints of other networks, by Endpoint.Key(): the gateways sent instead.
	Via map[string][]collections.NetworkGateway
	// Placed are the endpoints the CLA holds, by address (a gateway's included).
	Placed map[string]Placement
	// Distribute is the From of the localityLbSetting distribute rule applied ("" for none).
	Distribute string
}

// Placement is where a plan put an endpoint it sends, as the CLA holds it.
type Placement struct {
	Port     uint32
	Health   collections.HealthStatus
	Locality collections.Locality
	Priority uint32
	// LocalityWeight is the weight of the endpoint's LocalityLbEndpoints, Weight its own.
	LocalityWeight, Weight uint32
	// TLSMode is its tlsMode metadata ("" for none).
	TLSMode string
	// HashKey is its envoy.lb hash_key ("" for none).
	HashKey string
}

// NewTrace is an empty trace.
func NewTrace() *Trace {
	return &Trace{Left: map[string]Exclusion{}, Via: map[string][]collections.NetworkGateway{}, Placed: map[string]Placement{}}
}

// leave records that an endpoint is left out by rule x (Kept: nothing); the first rule stays.
func (t *Trace) leave(e *collections.Endpoint, x Exclusion) {
	if t == nil || x == Kept {
		return
	}
	if _, ok := t.Left[e.Key()]; !ok {
		t.Left[e.Key()] = x
	}
}

// via records that an endpoint of another network is reached through gateways.
func (t *Trace) via(e *collections.Endpoint, gws []collections.NetworkGateway) {
	if t == nil {
		return
	}
	t.leave(e, ExcludedThroughGateway)
	t.Via[e.Key()] = gws
}

// place records where the finished plan puts each endpoint it sends.
func (t *Trace) place(p CLAPlan) {
	if t == nil {
		return
	}
	for _, g := range p.Groups {
		lw := uint32(g.weight())
		for _, e := range g.Endpoints {
			t.Placed[e.Address] = Placement{Port: e.Port, Health: SentHealth(e), Locality: g.Locality, Priority: g.Priority,
				LocalityWeight: lw, Weight: e.Meta.LBWeight(), TLSMode: p.TLS.Value(e), HashKey: HashKeyOf(p.HashKey, e)}
		}
	}
}
