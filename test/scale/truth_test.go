package scale

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/fleet"
	"github.com/krteds/krteds/test/scale/rig"
)

// truth is what the EndpointSlices say, joined with the Pods that exist, as the rig's own
// informers see them (they watch the same API server krteds does), and what every client holds
// against it. One lock guards both, so that
// a client's CLA and a slice change are ordered: a client is current for a service when the
// healthy addresses of its CLA are the ready addresses of the service's slices.
type truth struct {
	mu sync.Mutex
	// updates wakes the waits after each change of the slices or of what a client holds.
	updates *fixtures.Waker
	svcs    map[string]*svcTruth
	// changed is, per address, when the slices last changed its readiness, and to what.
	changed   map[uint32]readyChange
	addrReady map[uint32]bool
	// pods are the Pods that exist; podSvc is the service whose slices name each Pod.
	pods   map[string]bool
	podSvc map[string]string
	// addrPod is the Pod each ready address was last seen with; podSeen and podGone are when
	// the rig's informer saw each Pod arrive and go (for the account of a violation).
	addrPod map[uint32]string
	// listed is when the slices first listed each address ready for the Pod it names now.
	listed  map[uint32]time.Time
	podSeen map[string]time.Time
	podGone map[string]time.Time
	// podChanged is, per Pod named by a slice, when the slices last changed its readiness (an
	// address may pass from a deleted Pod to a new one: a Pod's name is its own).
	podChanged map[string]readyChange
	podReady   map[string]bool
	// clients are the fleet's, tracked from the moment they are added.
	clients []*tracked
	// suspects are CLAs that held fewer healthy endpoints than the slices' ready ones when they
	// arrived: partial, unless the slices held as few within the lag allowed (judged later, once
	// the rig has seen the slices around them).
	suspects []suspect
	// blind are stretches in which the rig's own informers may have been behind krteds's (the
	// API server restarted: each watch comes back on its own backoff); a CLA in one may run
	// ahead of the rig's view until its end.
	blind [][2]time.Time
	// late is the ages of the suspects that held a state the slices had left more than the lag
	// allowed before: late, not partial.
	late []time.Duration
	// programmed is, per client that held an earlier state, when it received a state the slices
	// made (not one a Pod's arrival or going made) and how long after the slice's trigger time:
	// the network programming latency as the rig measures it.
	programmed []programmed
}

type programmed struct {
	at time.Time
	d  time.Duration
}

// history is how many states of a service the truth keeps.
const history = 4096

type svcTruth struct {
	name   string
	slices map[string][]readyEndpoint // slice → its ready endpoints
	stamps map[string]string          // slice → the trigger time its last version was stamped with
	states []*state                   // the last ones, oldest first
}

// readyEndpoint is a ready address of a slice and the Pod its targetRef names ("" for none).
type readyEndpoint struct {
	ip  uint32
	pod string
}

// state is one set of ready addresses of a service, from when the slices held it; trigger is
// the trigger time of the slice whose change made it (zero for a Pod's arrival or going).
type state struct {
	seq     int
	at      time.Time
	trigger time.Time
	set     []uint32
	// reached counts the clients that have held this state or a later one; allAt is when the
	// last of them did (zero until then).
	reached int
	allAt   time.Time
}

func (s *svcTruth) newest() *state {
	if len(s.states) == 0 {
		return nil
	}
	return s.states[len(s.states)-1]
}

type readyChange struct {
	at    time.Time
	ready bool
}

type suspect struct {
	svc     string
	at      time.Time
	healthy int
	client  int
	// missing is some of the ready addresses the CLA lacked (as the rig saw the slices then).
	missing []uint32
	// version is the CLA's; set its healthy addresses.
	version string
	set     []uint32
}

// tracked is what one client holds, per service.
type tracked struct {
	i    int
	held map[string]*heldCLA
	// behind counts the services whose CLA the client holds differs from the slices now.
	behind int
	// waiting is set while the client's stream is broken or resuming, until it is current again.
	waiting bool
	// moves are the client's stream breaks, and what followed each.
	moves []move
	// resume is, for a delta client that resumed, the versions it said it held (those not yet
	// sent again).
	resume map[string]string
}

// move is one break of a client's stream and what followed.
type move struct {
	from, to int
	broke    time.Time
	resumed  time.Time
	back     time.Time // current on every service again (zero: not yet)
	// held is, for a delta client, the resources it said it held when it resumed, and resent
	// those the server sent again with the version it held.
	held, resent int
	planned      bool // the rig moved it (rebalancing), not a break
	reason       string
}

type heldCLA struct {
	version string
	set     []uint32
	at      time.Time
	seq     int // the newest state it has held (-1: none)
	current bool
}

func newTruth() *truth {
	tr := &truth{svcs: map[string]*svcTruth{}, changed: map[uint32]readyChange{}, addrReady: map[uint32]bool{},
		pods: map[string]bool{}, podSvc: map[string]string{},
		addrPod: map[uint32]string{}, listed: map[uint32]time.Time{}, podChanged: map[string]readyChange{}, podReady: map[string]bool{}, podSeen: map[string]time.Time{}, podGone: map[string]time.Time{}}
	tr.updates = fixtures.NewWaker()
	return tr
}

// watchSlices starts the rig's informers on the mesh's EndpointSlices and Pods.
func (r *judged) watchSlices() {
	r.T.Helper()
	tr := newTruth()
	r.truth = tr
	f := informers.NewSharedInformerFactoryWithOptions(r.Admin, 0, informers.WithNamespace(rig.Namespace))
	inf := f.Discovery().V1().EndpointSlices().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { tr.slice(o.(*discoveryv1.EndpointSlice), false) },
		UpdateFunc: func(_, o any) { tr.slice(o.(*discoveryv1.EndpointSlice), false) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if s, ok := o.(*discoveryv1.EndpointSlice); ok {
				tr.slice(s, true)
			}
		},
	})
	// Only whether each Pod exists matters: the informer keeps their names.
	pods := f.Core().V1().Pods().Informer()
	_ = pods.SetTransform(func(o any) (any, error) {
		if p, ok := o.(*corev1.Pod); ok {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion}}, nil
		}
		return o, nil
	})
	_, _ = pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(o any) { tr.pod(o.(*corev1.Pod).Name, true) },
		DeleteFunc: func(o any) {
			if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = d.Obj
			}
			if p, ok := o.(*corev1.Pod); ok {
				tr.pod(p.Name, false)
			}
		},
	})
	stop := make(chan struct{})
	r.T.Cleanup(func() { close(stop) })
	f.Start(stop)
	f.WaitForCacheSync(stop)
}

// slice records one slice as the informer delivers it.
func (tr *truth) slice(s *discoveryv1.EndpointSlice, deleted bool) {
	name := s.Labels[discoveryv1.LabelServiceName]
	now := time.Now()
	var ready []readyEndpoint
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if !deleted {
		for _, e := range s.Endpoints {
			ok := e.Conditions.Ready != nil && *e.Conditions.Ready && (e.Conditions.Terminating == nil || !*e.Conditions.Terminating)
			pod := ""
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
				pod = e.TargetRef.Name
				if was, known := tr.podReady[pod]; !known || was != ok {
					tr.podReady[pod] = ok
					tr.podChanged[pod] = readyChange{at: now, ready: ok}
				}
			}
			for _, a := range e.Addresses {
				ip, v4 := fleet.IPv4(a)
				if !v4 {
					continue
				}
				if ok {
					ready = append(ready, readyEndpoint{ip: ip, pod: pod})
					if pod != "" {
						tr.podSvc[pod] = name
						if tr.addrPod[ip] != pod {
							tr.listed[ip] = now
						}
						tr.addrPod[ip] = pod
					}
				}
				if was, known := tr.addrReady[ip]; !known || was != ok {
					tr.addrReady[ip] = ok
					tr.changed[ip] = readyChange{at: now, ready: ok}
				}
			}
		}
	}
	st := tr.svcs[name]
	if st == nil {
		st = &svcTruth{name: name, slices: map[string][]readyEndpoint{}, stamps: map[string]string{}}
		tr.svcs[name] = st
	}
	// A Pod the slice named ready and names no more (its endpoint removed) is not ready now.
	inNew := map[string]bool{}
	for _, e := range ready {
		inNew[e.pod] = true
	}
	for _, e := range st.slices[s.Name] {
		if e.pod != "" && !inNew[e.pod] && tr.podReady[e.pod] {
			tr.podReady[e.pod] = false
			tr.podChanged[e.pod] = readyChange{at: now, ready: false}
		}
	}
	// A version carrying its previous version's stamp (the controller keeps the annotation when
	// no Pod change stamped a new one) has no trigger of its own, as krteds counts it
	// (docs/OPERATING.md).
	stamp := s.Annotations["endpoints.kubernetes.io/last-change-trigger-time"]
	carried := st.stamps[s.Name] == stamp
	if deleted {
		delete(st.slices, s.Name)
		delete(st.stamps, s.Name)
	} else {
		st.slices[s.Name] = ready
		st.stamps[s.Name] = stamp
	}
	var trigger time.Time
	if !carried {
		trigger, _ = time.Parse(time.RFC3339Nano, stamp)
	}
	tr.recompute(st, now, trigger)
}

// pod records that a Pod exists, or no longer does: an endpoint whose Pod is gone is no
// endpoint (krteds, as istiod, builds an endpoint only with its targetRef Pod), whatever its
// slice still says.
func (tr *truth) pod(name string, exists bool) {
	now := time.Now()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if exists {
		tr.pods[name] = true
		tr.podSeen[name] = now
	} else {
		delete(tr.pods, name)
		tr.podGone[name] = now
	}
	if st := tr.svcs[tr.podSvc[name]]; st != nil {
		tr.recompute(st, now, time.Time{})
	}
	if !exists {
		delete(tr.podSvc, name)
	}
}

// recompute derives a service's ready addresses from its slices and the Pods that exist, and
// records a new state when they changed; the lock is held.
func (tr *truth) recompute(st *svcTruth, now, trigger time.Time) {
	var set []uint32
	for _, eps := range st.slices {
		for _, e := range eps {
			if e.pod == "" || tr.pods[e.pod] {
				set = append(set, e.ip)
			}
		}
	}
	slices.Sort(set)
	set = slices.Compact(set)
	name := st.name
	if n := st.newest(); n != nil && slices.Equal(n.set, set) {
		tr.updates.Wake()
		return
	}
	seq := 0
	if n := st.newest(); n != nil {
		seq = n.seq + 1
	}
	ns := &state{seq: seq, at: now, trigger: trigger, set: set}
	st.states = append(st.states, ns)
	if len(st.states) > history {
		st.states = st.states[len(st.states)-history:]
	}
	// Every client is now current for the service, or not, by what it already holds.
	for _, c := range tr.clients {
		h := c.held[name]
		if h == nil {
			continue
		}
		if slices.Equal(h.set, set) {
			at := h.at
			if at.Before(now) {
				at = now
			}
			tr.programmedBy(c, h, ns, h.version != "", h.at)
			tr.reach(c, st, ns, at)
		}
		tr.setCurrent(c, h, slices.Equal(h.set, set), now)
	}
	tr.updates.Wake()
}

// programmedBy records the network programming latency of a state a client received at at
// (held: it held an earlier one), unless its stream is broken or resuming.
func (tr *truth) programmedBy(c *tracked, h *heldCLA, k *state, held bool, at time.Time) {
	if held && !c.waiting && k.seq > h.seq && !k.trigger.IsZero() {
		tr.programmed = append(tr.programmed, programmed{at: at, d: at.Sub(k.trigger)})
	}
}

// programmingBetween is the network programming latencies of the states received in [from, to].
func (tr *truth) programmingBetween(from, to time.Time) []time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []time.Duration
	for _, p := range tr.programmed {
		if !p.at.Before(from) && !p.at.After(to) {
			out = append(out, p.d)
		}
	}
	return out
}

// reach records that client c holds state k of st (and so every state it had not held before).
func (tr *truth) reach(c *tracked, st *svcTruth, k *state, at time.Time) {
	h := c.held[st.name]
	if h == nil || k.seq <= h.seq {
		return
	}
	first := st.states[0].seq
	for i := max(h.seq+1, first) - first; i <= k.seq-first; i++ {
		s := st.states[i]
		s.reached++
		if s.reached == len(tr.clients) {
			s.allAt = at
		}
	}
	h.seq = k.seq
}

func (tr *truth) setCurrent(c *tracked, h *heldCLA, current bool, now time.Time) {
	if h.current == current {
		return
	}
	h.current = current
	if current {
		c.behind--
	} else {
		c.behind++
	}
	if c.behind == 0 && c.waiting {
		c.waiting = false
		c.moves[len(c.moves)-1].back = now
	}
}

// track adds a client; it is behind on every service until it holds it. The states before a
// service's newest are not the new client's to reach.
func (tr *truth) track(i int) *tracked {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	c := &tracked{i: i, held: map[string]*heldCLA{}}
	for name, st := range tr.svcs {
		h := &heldCLA{seq: -1}
		if n := st.newest(); n != nil {
			h.seq = n.seq - 1
			for _, s := range st.states[:len(st.states)-1] {
				s.reached++
			}
		}
		c.held[name] = h
		c.behind++
	}
	tr.clients = append(tr.clients, c)
	return c
}

// received records a CLA client c received for a service: its version, and its healthy addresses
// (sorted, without duplicates).
func (tr *truth) received(c *tracked, svc, version string, set []uint32, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if c.resume != nil {
		if v, ok := c.resume[svc]; ok {
			if v == version {
				c.moves[len(c.moves)-1].resent++
			}
			delete(c.resume, svc)
		}
	}
	h := c.held[svc]
	if h == nil {
		h = &heldCLA{seq: -1}
		c.held[svc] = h
		c.behind++
	}
	held := h.version != ""
	h.version, h.set, h.at = version, set, at
	st := tr.svcs[svc]
	if st == nil {
		// A service the slices do not know yet: it is current once they do.
		return
	}
	n := st.newest()
	if missing := lacking(n.set, set, 8); len(missing) > 0 {
		tr.suspects = append(tr.suspects, suspect{svc: svc, at: at, healthy: len(set), client: c.i, missing: missing, version: version, set: set})
	}
	// Mostly the newest; a client ahead of the rig's informer matches none yet.
	for k := len(st.states) - 1; k >= 0 && k >= len(st.states)-64; k-- {
		if slices.Equal(st.states[k].set, set) {
			tr.programmedBy(c, h, st.states[k], held, at)
			tr.reach(c, st, st.states[k], at)
			break
		}
	}
	tr.setCurrent(c, h, slices.Equal(n.set, set), at)
	tr.updates.Wake()
}

// broke records that a client's stream broke (or the rig moved it) and where it goes next; a
// stream that never opened continues the move it was part of.
func (tr *truth) broke(c *tracked, from, to int, continued, planned bool, reason string, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if continued && len(c.moves) > 0 {
		c.moves[len(c.moves)-1].to = to
		return
	}
	c.moves = append(c.moves, move{from: from, to: to, broke: at, planned: planned, reason: reason})
	c.waiting, c.resume = true, nil
}

// resumed marks a client's new stream open, with the versions it said it holds (delta): those
// the server sends again with the same version are counted. A client that holds the slices' state
// already is back at once.
func (tr *truth) resumed(c *tracked, versions map[string]string, at time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(c.moves) == 0 {
		return // the first stream
	}
	m := &c.moves[len(c.moves)-1]
	m.resumed, m.held = at, len(versions)
	c.resume = versions
	if c.waiting && c.behind == 0 {
		c.waiting = false
		m.back = at
		tr.updates.Wake()
	}
}

// movesBetween is every move whose break fell in [from, to], with the client's index.
func (tr *truth) movesBetween(from, to time.Time) (moves []move, clients []int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, c := range tr.clients {
		for _, m := range c.moves {
			if !m.broke.Before(from) && !m.broke.After(to) {
				moves = append(moves, m)
				clients = append(clients, c.i)
			}
		}
	}
	return moves, clients
}

// waitBack waits until no client is waiting to be current after a move.
func (tr *truth) waitBack(timeout time.Duration) bool {
	return tr.waitFor(timeout, func() bool {
		for _, c := range tr.clients {
			if c.waiting {
				return false
			}
		}
		return true
	})
}

// held is the versions client c holds by service (for a delta client's resume).
func (tr *truth) heldVersions(c *tracked) map[string]string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make(map[string]string, len(c.held))
	for svc, h := range c.held {
		if h.version != "" {
			out[svc] = h.version
		}
	}
	return out
}

// waitFor waits until cond, read under the truth's lock (the caller does not hold it), holds;
// false if timeout passed first. Every update of the truth wakes it.
func (tr *truth) waitFor(timeout time.Duration, cond func() bool) bool {
	return tr.updates.Wait(timeout, "", func() (bool, string) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return cond(), ""
	}) == nil
}

// waitCurrent waits until every tracked client is current on every service.
func (tr *truth) waitCurrent(timeout time.Duration) (bool, string) {
	behind, worst := 0, 0
	ok := tr.waitFor(timeout, func() bool {
		behind, worst = 0, 0
		for _, c := range tr.clients {
			if c.behind > 0 {
				behind++
				worst = max(worst, c.behind)
			}
		}
		return behind == 0
	})
	if ok {
		return true, ""
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return false, describeBehind(tr, behind, worst)
}

func describeBehind(tr *truth, behind, worst int) string {
	var svcs []string
	for _, c := range tr.clients {
		if c.behind == 0 {
			continue
		}
		for svc, h := range c.held {
			if !h.current {
				svcs = append(svcs, svc)
			}
		}
		break
	}
	sort.Strings(svcs)
	if len(svcs) > 5 {
		svcs = svcs[:5]
	}
	return fmt.Sprintf("%d clients behind the slices (at most %d services), e.g. on %v", behind, worst, svcs)
}

// readyTotal is the ready endpoints of every service.
func (tr *truth) readyTotal() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, st := range tr.svcs {
		if s := st.newest(); s != nil {
			n += len(s.set)
		}
	}
	return n
}

// readyOf is a service's ready addresses now.
func (tr *truth) readyOf(svc string) []uint32 {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if st := tr.svcs[svc]; st != nil {
		if s := st.newest(); s != nil {
			return s.set
		}
	}
	return nil
}

// heldBefore reports whether the slices held exactly this set at some time before at (within the
// history kept), and how long before at they left it.
func (st *svcTruth) heldBefore(set []uint32, at time.Time) (time.Duration, bool) {
	for i := len(st.states) - 1; i >= 0; i-- {
		s := st.states[i]
		if s.at.After(at) {
			continue
		}
		if slices.Equal(s.set, set) {
			if i == len(st.states)-1 || st.states[i+1].at.After(at) {
				return 0, true
			}
			return at.Sub(st.states[i+1].at), true
		}
	}
	return 0, false
}

// blindFrom records that the rig's informers may have trailed krteds's from from to to.
func (tr *truth) blindFrom(from, to time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.blind = append(tr.blind, [2]time.Time{from, to})
}

// lateCLAs is the ages of the CLAs judged late rather than partial since the last call.
func (tr *truth) lateCLAs() []time.Duration {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := tr.late
	tr.late = nil
	return out
}

// steadyIn is the addresses a service had ready (their Pods present) throughout [from, to]: in
// every state in force over it. false if the history no longer reaches back to from. Before its
// first state the service had none.
func (st *svcTruth) steadyIn(from, to time.Time) ([]uint32, bool) {
	if len(st.states) == 0 {
		return nil, true
	}
	if st.states[0].at.After(from) {
		return nil, st.states[0].seq == 0
	}
	var steady []uint32
	first := true
	for i, s := range st.states {
		if s.at.After(to) {
			break
		}
		// The state in force at from is the last at or before it.
		inForce := !s.at.After(from) && (i == len(st.states)-1 || st.states[i+1].at.After(from))
		if !s.at.After(from) && !inForce {
			continue
		}
		if first {
			steady, first = slices.Clone(s.set), false
			continue
		}
		steady = slices.DeleteFunc(steady, func(a uint32) bool { _, found := slices.BinarySearch(s.set, a); return !found })
	}
	return steady, true
}

// lacking is up to n of the addresses of want (sorted) that have (sorted) lacks.
func lacking(want, have []uint32, n int) []uint32 {
	var out []uint32
	for _, a := range want {
		if _, found := slices.BinarySearch(have, a); !found {
			if out = append(out, a); len(out) == n {
				break
			}
		}
	}
	return out
}

// lag is how long a CLA may trail the slices, and run ahead of the rig's view of them, before
// lacking an endpoint they hold counts as partial. The rig's informers run in a process that
// shares the two cores with everything else and trail krteds' when the machine is busy: in a
// medium rollout a CLA lacked a Pod that krteds had seen deleted and the rig saw gone 1.15 s
// after the CLA arrived.
const lagBehind, lagAhead = 5 * time.Second, 2 * time.Second

// violation is a CLA that lacked an endpoint ready throughout the time around its arrival, and
// held a set of them the slices never held.
type violation struct {
	suspect
	steady int // the endpoints ready throughout
	// account says, for some of the addresses the CLA lacked, what the rig saw of them.
	account []string
}

// accountOf says what the rig saw of a ready address the CLA lacked: when the slices last
// changed its readiness, its Pod, and when that Pod arrived and went. The lock is held.
func (tr *truth) accountOf(a uint32) string {
	out := fleet.IPString(a)
	if c, ok := tr.changed[a]; ok {
		out += fmt.Sprintf(" ready=%v in the slices since %s", c.ready, c.at.Format("15:04:05.000"))
	}
	pod := tr.addrPod[a]
	if pod == "" {
		return out
	}
	out += " pod " + pod
	if t, ok := tr.listed[a]; ok {
		out += " listed ready for it " + t.Format("15:04:05.000")
	}
	if t, ok := tr.podSeen[pod]; ok {
		out += " seen " + t.Format("15:04:05.000")
	}
	if t, ok := tr.podGone[pod]; ok {
		out += " gone " + t.Format("15:04:05.000")
	}
	return out
}

// violations judges the suspects that arrived before until (the rig has seen the slices past
// them by then), and keeps the others.
func (tr *truth) violations(until time.Time) []violation {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []violation
	keep := tr.suspects[:0]
	for _, s := range tr.suspects {
		if s.at.After(until.Add(-lagAhead)) {
			keep = append(keep, s)
			continue
		}
		st := tr.svcs[s.svc]
		ahead := lagAhead
		for _, b := range tr.blind {
			if !s.at.Before(b[0]) && !s.at.After(b[1]) {
				ahead = max(ahead, b[1].Sub(s.at)+lagAhead)
			}
		}
		steady, ok := st.steadyIn(s.at.Add(-lagBehind), s.at.Add(ahead))
		missing := lacking(steady, s.set, 8)
		if ok && len(missing) == 0 {
			continue
		}
		if !ok {
			missing = s.missing
		}
		// A state the slices really held, only late: counted apart (its age), not as partial.
		// An empty CLA is never excused so.
		if age, held := st.heldBefore(s.set, s.at); held && len(s.set) > 0 {
			tr.late = append(tr.late, age)
			continue
		}
		v := violation{suspect: s, steady: len(steady)}
		for _, a := range missing {
			v.account = append(v.account, tr.accountOf(a))
		}
		out = append(out, v)
	}
	tr.suspects = keep
	return out
}

// podReadyChanged waits until the slices say the Pod's readiness is ready, and returns when they
// first said so at or after since.
func (tr *truth) podReadyChanged(pod string, ready bool, since time.Time, timeout time.Duration) (time.Time, bool) {
	return waitReadyChange(tr, tr.podChanged, pod, ready, since, timeout)
}

// addressChanged waits until the slices say addr's readiness is ready, and returns when they
// first said so at or after since.
func (tr *truth) addressChanged(addr uint32, ready bool, since time.Time, timeout time.Duration) (time.Time, bool) {
	return waitReadyChange(tr, tr.changed, addr, ready, since, timeout)
}

// waitReadyChange waits until changes (one of the truth's, read under its lock) says key's
// readiness is ready, changed at or after since, and returns when.
func waitReadyChange[K comparable](tr *truth, changes map[K]readyChange, key K, ready bool, since time.Time, timeout time.Duration) (time.Time, bool) {
	var at time.Time
	ok := tr.waitFor(timeout, func() bool {
		c, ok := changes[key]
		at = c.at
		return ok && c.ready == ready && !c.at.Before(since)
	})
	return at, ok
}

// lags is, for every state of the services that the slices held from after from until to, how
// long after the rig saw it every client held it (or a later one): the time beyond the slice
// write. Negative lags (a client that held it before the rig's informer saw it) count as 0;
// unfinished is the number of states not every client has held.
func (tr *truth) lags(from, to time.Time) (lags []time.Duration, unfinished int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, st := range tr.svcs {
		for _, s := range st.states {
			if !s.at.After(from) || s.at.After(to) {
				continue
			}
			if s.allAt.IsZero() {
				unfinished++
				continue
			}
			lags = append(lags, max(0, s.allAt.Sub(s.at)))
		}
	}
	return lags, unfinished
}

// waitState waits until every client holds the first state of svc the slices held after t (or
// a later one), and returns how long after the rig saw it they all did.
func (tr *truth) waitState(svc string, t time.Time, timeout time.Duration) (time.Duration, bool) {
	var lag time.Duration
	ok := tr.waitFor(timeout, func() bool {
		st := tr.svcs[svc]
		if st == nil {
			return false
		}
		for _, s := range st.states {
			if s.at.After(t) {
				lag = max(0, s.allAt.Sub(s.at))
				return !s.allAt.IsZero()
			}
		}
		return false
	})
	return lag, ok
}

// waitReadyCount waits until the slices hold n ready endpoints of svc, and returns that state.
func (tr *truth) waitReadyCount(svc string, n int, timeout time.Duration) (*state, bool) {
	var s *state
	ok := tr.waitFor(timeout, func() bool {
		if st := tr.svcs[svc]; st != nil {
			s = st.newest()
		}
		return s != nil && len(s.set) == n
	})
	return s, ok
}

// waitHeld waits until every client holds state s (or a later one), and returns how long after
// the rig saw it they all did.
func (tr *truth) waitHeld(s *state, timeout time.Duration) (time.Duration, bool) {
	var lag time.Duration
	ok := tr.waitFor(timeout, func() bool {
		lag = max(0, s.allAt.Sub(s.at))
		return !s.allAt.IsZero()
	})
	return lag, ok
}

// services lists the services the slices know, sorted.
func (tr *truth) services() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []string
	for s := range tr.svcs {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
