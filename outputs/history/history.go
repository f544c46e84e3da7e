// Package history keeps, per service, a bounded record of the last changes of its endpoints:
// the input change behind each (an EndpointSlice's version, its trigger time, when krteds saw
// it), when krteds computed the result, the endpoints it added, removed and changed in health,
// the CLA versions it produced per proxy class, and how many proxies acknowledged or rejected
// it. With what each proxy holds now (the xDS server's Holders), it answers when a change
// reached which proxy, and where it stopped (Timeline).
package history

import (
	"maps"
	"sync"
	"time"

	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
)

// Bounds of the record.
const (
	// DefaultPerService is how many changes are kept per service.
	DefaultPerService = 32
	// maxListed bounds the endpoints one change lists of each kind (added, removed, changed in
	// health); the rest are counted.
	maxListed = 8
	// maxRejections bounds the rejections kept per change.
	maxRejections = 4
	// maxPods bounds the Pods whose deletion is remembered.
	maxPods = 4096
)

// Change is one change of a service's endpoints.
type Change struct {
	// Seq numbers the service's changes from 1, as the store saw them.
	Seq uint64 `json:"seq"`
	// Cause is the latest input change the endpoints were computed from (zero: none says
	// when). Again: that change was recorded before; this is a computation for another reason
	// (a Pod arrived or went, a policy or a proxy class changed).
	Cause collections.Cause `json:"cause"`
	Again bool              `json:"again,omitempty"`
	// Computed is when the store saw the service's new endpoints, or its new CLAs.
	Computed time.Time `json:"computed"`
	// endpoints: the endpoints' difference is recorded (a CLA may be seen first).
	endpoints bool
	Added     []Endpoint `json:"added,omitempty"`
	Removed   []Endpoint `json:"removed,omitempty"`
	Health    []Endpoint `json:"health,omitempty"`
	// Unlisted counts the endpoints added, removed or changed in health past those listed;
	// Updated those changed otherwise (their port, their metadata: labels, locality, identity).
	Unlisted int `json:"unlisted,omitempty"`
	Updated  int `json:"updated,omitempty"`
	// CLAs are the versions of the service's CLAs computed after it, by cluster name and proxy
	// class ("" for a CLA every class shares).
	CLAs map[string]map[string]uint64 `json:"clas,omitempty"`
	// Delivery is how the change reached the proxies.
	Delivery Delivery `json:"delivery"`
}

// Endpoint is an endpoint a change touched: its health after the change (before it, From, for a
// change of health).
type Endpoint struct {
	Address  string                   `json:"address"`
	Port     uint32                   `json:"port"`
	PortName string                   `json:"portName,omitempty"`
	Pod      string                   `json:"pod,omitempty"`
	Slice    string                   `json:"slice,omitempty"`
	Health   collections.HealthStatus `json:"health"`
	From     collections.HealthStatus `json:"from,omitempty"`
}

// Delivery counts the proxies a change reached: those that acknowledged a response carrying it
// (the first and last at), and those that rejected one.
type Delivery struct {
	Acked      int         `json:"acked"`
	FirstAck   time.Time   `json:"firstAck,omitzero"`
	LastAck    time.Time   `json:"lastAck,omitzero"`
	LastHanded time.Time   `json:"lastHanded,omitzero"`
	Rejected   int         `json:"rejected,omitempty"`
	Rejections []Rejection `json:"rejections,omitempty"`
}

// Rejection is a proxy's NACK of a response carrying a change.
type Rejection struct {
	NodeID string    `json:"nodeId"`
	At     time.Time `json:"at"`
	Error  string    `json:"error"`
}

// PodEnd is what the store saw of a Pod going away: when it was first seen being deleted, and
// when it was gone (zero: not yet).
type PodEnd struct {
	Deleting time.Time `json:"deleting,omitzero"`
	Gone     time.Time `json:"gone,omitzero"`
}

// Store is the record. Its lock is taken by the graph's handlers and the streams' deliveries,
// briefly; nothing is computed under it but the bookkeeping.
type Store struct {
	perService int

	mu       sync.Mutex
	services map[string]*ring
	// byCause finds the service and change an input change produced.
	byCause map[collections.Cause]changeRef
	pods    podEnds
}

type changeRef struct {
	service string
	seq     uint64
}

// keyOf is the key of an input change: the whole change (a manifest's object has no
// resourceVersion; when krteds saw it tells its versions apart).
func keyOf(c collections.Cause) collections.Cause { return c }

// ring is one service's last changes, oldest first.
type ring struct {
	changes []*Change
	seq     uint64
}

// New makes an empty store keeping perService changes a service (DefaultPerService if not
// positive).
func New(perService int) *Store {
	if perService <= 0 {
		perService = DefaultPerService
	}
	return &Store{perService: perService, services: map[string]*ring{}, byCause: map[collections.Cause]changeRef{},
		pods: podEnds{byKey: map[string]*PodEnd{}}}
}

// Inputs are the collections the store follows.
type Inputs struct {
	ServiceEndpoints krt.Collection[collections.ServiceEndpoints]
	CLAs             krt.Collection[collections.ResourceSet]
}

// FollowPods registers the store's handler of the Pods going away. Registered before the graph
// is built on the Pods, it sees each Pod go before the graph computes what its going changes.
func (s *Store) FollowPods(pods krt.Collection[*collections.Pod]) {
	pods.RegisterBatch(func(evs []krt.Event[*collections.Pod]) {
		now := time.Now()
		for _, ev := range evs {
			var old, cur *collections.Pod
			if ev.Old != nil {
				old = *ev.Old
			}
			if ev.New != nil {
				cur = *ev.New
			}
			s.podChanged(old, cur, now)
		}
	}, false)
}

// Follow registers the store's handlers on the collections (nil ones are skipped); what the
// collections hold already is recorded as their first change.
func (s *Store) Follow(in Inputs) {
	if in.ServiceEndpoints != nil {
		in.ServiceEndpoints.RegisterBatch(func(evs []krt.Event[collections.ServiceEndpoints]) {
			now := time.Now()
			for _, ev := range evs {
				s.endpointsChanged(ev.Old, ev.New, now)
			}
		}, true)
	}
	if in.CLAs != nil {
		in.CLAs.RegisterBatch(func(evs []krt.Event[collections.ResourceSet]) {
			for _, ev := range evs {
				if ev.New != nil {
					s.clasComputed(*ev.New)
				}
			}
		}, true)
	}
}

// endpointsChanged records a service's new endpoints (new nil: the service is gone).
func (s *Store) endpointsChanged(old, cur *collections.ServiceEndpoints, now time.Time) {
	if cur == nil {
		s.mu.Lock()
		s.forget(old.ResourceName())
		s.mu.Unlock()
		return
	}
	var before []*collections.Endpoint
	if old != nil {
		before = old.Endpoints
	}
	var d Change
	diff(before, cur.Endpoints, &d)
	if old != nil && len(d.Added)+len(d.Removed)+len(d.Health)+d.Unlisted+d.Updated == 0 {
		return // nothing a proxy may see of the endpoints changed (a record, or the cause, did)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	service := cur.ResourceName()
	c := s.latestWith(service, cur.Cause)
	switch {
	case c != nil && !c.endpoints:
		// Its CLAs were seen first.
	case c != nil || (old != nil && !cur.Cause.IsZero() && (old.Cause == cur.Cause || cur.Cause.Seen < old.Cause.Seen)):
		// The same change, or an older one (the latest input went away: a Pod, a slice).
		c = &Change{Cause: cur.Cause, Again: true, Computed: now}
		s.add(service, c)
	default:
		c = &Change{Cause: cur.Cause, Computed: now}
		s.add(service, c)
	}
	c.endpoints = true
	c.Added, c.Removed, c.Health, c.Unlisted, c.Updated = d.Added, d.Removed, d.Health, d.Unlisted, d.Updated
}

// latestWith is a service's latest change with that cause (s.mu held; nil: none, or the cause
// is zero).
func (s *Store) latestWith(service string, cause collections.Cause) *Change {
	r := s.services[service]
	if r == nil || cause.IsZero() {
		return nil
	}
	for i := len(r.changes) - 1; i >= 0; i-- {
		if r.changes[i].Cause == cause {
			return r.changes[i]
		}
	}
	return nil
}

// add appends a change to a service's ring (s.mu held).
func (s *Store) add(service string, c *Change) {
	r := s.services[service]
	if r == nil {
		r = &ring{}
		s.services[service] = r
	}
	r.seq++
	c.Seq = r.seq
	if len(r.changes) == s.perService {
		if gone := r.changes[0]; !gone.Cause.IsZero() {
			if ref := s.byCause[keyOf(gone.Cause)]; ref.service == service && ref.seq == gone.Seq {
				delete(s.byCause, keyOf(gone.Cause))
			}
		}
		copy(r.changes, r.changes[1:])
		r.changes = r.changes[:len(r.changes)-1]
	}
	r.changes = append(r.changes, c)
	if !c.Cause.IsZero() && !c.Again {
		s.byCause[keyOf(c.Cause)] = changeRef{service: service, seq: c.Seq}
	}
}

// forget drops a service's record (s.mu held).
func (s *Store) forget(service string) {
	r := s.services[service]
	if r == nil {
		return
	}
	for _, c := range r.changes {
		if ref, ok := s.byCause[keyOf(c.Cause)]; ok && ref.service == service {
			delete(s.byCause, keyOf(c.Cause))
		}
	}
	delete(s.services, service)
}

// clasComputed records a CLA set's versions with the latest change of its service of the
// same cause that has none of them yet; with a change of its own when that change has other
// versions of it (the CLA was computed again without its endpoints changing: a policy, a proxy
// class), or when none has the cause yet (the endpoints' change is seen next).
func (s *Store) clasComputed(set collections.ResourceSet) {
	if set.TypeURL == "" || set.Service == "" {
		return
	}
	versions := map[string]uint64{}
	var cause collections.Cause
	if set.Shared != nil {
		versions[""], cause = set.Shared.Version, set.Shared.Cause
	}
	for class, r := range set.ByClass {
		versions[class], cause = r.Version, cause.Later(r.Cause)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.latestWith(set.Service, cause)
	if c == nil && cause.IsZero() {
		if r := s.services[set.Service]; r != nil && len(r.changes) > 0 {
			c = r.changes[len(r.changes)-1]
		}
	}
	switch {
	case c == nil:
		c = &Change{Cause: cause, Computed: time.Now()}
		s.add(set.Service, c)
	case c.CLAs[set.Name] == nil:
	case maps.Equal(c.CLAs[set.Name], versions):
		return
	default:
		// Computed again: its endpoints' change, if any, is seen next and joins it.
		c = &Change{Cause: cause, Again: !cause.IsZero(), Computed: time.Now()}
		s.add(set.Service, c)
	}
	if c.CLAs == nil {
		c.CLAs = map[string]map[string]uint64{}
	}
	c.CLAs[set.Name] = versions
}

// Delivered records that a change reached a proxy (acknowledged at done), or that the proxy
// rejected it (reason).
func (s *Store) Delivered(c collections.Cause, nodeID string, handed, done time.Time, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.changeOf(c)
	if ch == nil {
		return
	}
	d := &ch.Delivery
	if reason != "" {
		d.Rejected++
		if len(d.Rejections) < maxRejections {
			d.Rejections = append(d.Rejections, Rejection{NodeID: nodeID, At: done, Error: reason})
		}
		return
	}
	d.Acked++
	if d.FirstAck.IsZero() || done.Before(d.FirstAck) {
		d.FirstAck = done
	}
	if done.After(d.LastAck) {
		d.LastAck = done
	}
	if handed.After(d.LastHanded) {
		d.LastHanded = handed
	}
}

// changeOf is the change an input change produced (s.mu held; nil: none kept).
func (s *Store) changeOf(c collections.Cause) *Change {
	ref, ok := s.byCause[keyOf(c)]
	if !ok {
		return nil
	}
	r := s.services[ref.service]
	if r == nil || len(r.changes) == 0 {
		return nil
	}
	i := int(ref.seq - r.changes[0].Seq)
	if i < 0 || i >= len(r.changes) {
		return nil
	}
	return r.changes[i]
}

// Changes is a copy of a service's record, oldest first.
func (s *Store) Changes(service string) []Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.services[service]
	if r == nil {
		return nil
	}
	out := make([]Change, len(r.changes))
	for i, c := range r.changes {
		out[i] = *c
		out[i].Delivery.Rejections = append([]Rejection(nil), c.Delivery.Rejections...)
	}
	return out
}

// PodEnd is what the store saw of a Pod going away (ok false: nothing).
func (s *Store) PodEnd(key string) (PodEnd, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pods.byKey[key]
	if p == nil {
		return PodEnd{}, false
	}
	return *p, true
}

// Size is the services recorded and their changes, for the memory figures.
func (s *Store) Size() (services, changes int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.services {
		changes += len(r.changes)
	}
	return len(s.services), changes
}
