package bench

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/fleet"
)

// Herd is a fleet of ADS proxies (test/fleet) that connect at once, each asking for the same
// clusters, and that behave as Envoy does when their stream breaks or is refused: they back off
// (0.5 s, doubled up to 8 s, with jitter) and connect again, a delta proxy telling the server the
// versions it holds (initial_resource_versions). Each proxy keeps, per cluster, only the version
// it holds (8 bytes): delta proxies decode responses without the CLA bodies, state-of-the-world
// ones read each body's name and hash it. The fleet counts what the proxies received (Bytes,
// Resources, Responses), the streams opened again (Retries) and those refused or broken, by
// code (Refused).
type Herd struct {
	*fleet.Fleet
	Delta bool
	// Clusters are the mesh's clusters; each proxy asks for a window of them (all by default).
	Clusters []string
	index    map[string]int
	proxies  []*herdProxy
	nodes    []adsclient.Node

	// complete counts the proxies that hold every cluster; completed wakes WaitComplete as it
	// grows.
	complete  atomic.Int64
	completed *fixtures.Waker
	// watches are the changes followed now, by cluster (one each; a new one replaces it).
	watches  sync.Map // int → *herdWatch
	watching atomic.Int64
	// aborted says why the herd's waits end without their condition (nil: they do not).
	aborted atomic.Pointer[string]
}

// NewHerd makes n proxies of the mesh of size s, each asking for per of its clusters (0: all): a
// window of them, the proxies' windows spread over the mesh as Size.Subscriptions spreads them.
func NewHerd(s Size, n, per int, delta bool) *Herd {
	h := &Herd{Delta: delta, completed: fixtures.NewWaker(),
		Fleet: fleet.New(fleet.Options{Addrs: []string{""}, Backoff: fleet.EnvoyBackoff})}
	for i := 0; i < s.Services; i++ {
		h.Clusters = append(h.Clusters, ClusterName(i))
	}
	h.index = make(map[string]int, len(h.Clusters))
	for i, c := range h.Clusters {
		h.index[c] = i
	}
	if per <= 0 || per > len(h.Clusters) {
		per = len(h.Clusters)
	}
	f := &Fleet{}
	for p := 0; p < n; p++ {
		hp := &herdProxy{h: h, p: p, start: p * per % len(h.Clusters), held: make([]uint64, per)}
		for k := 0; k < per; k++ {
			hp.subs = append(hp.subs, h.Clusters[(hp.start+k)%len(h.Clusters)])
		}
		h.proxies = append(h.proxies, hp)
		h.nodes = append(h.nodes, adsclient.Node{ID: f.NodeID(p), Namespace: meshNamespace, Locality: s.ProxyLocality(p)})
	}
	return h
}

// Start connects every proxy to addr at once.
func (h *Herd) Start(addr string) error {
	h.SetAddr(addr)
	for p, hp := range h.proxies {
		if _, err := h.Add(fleet.Spec{Node: h.nodes[p], Delta: h.Delta, Subs: hp.subs, Holder: hp}); err != nil {
			h.Close()
			return err
		}
	}
	h.Fleet.Start()
	return nil
}

// SetAddr moves the proxies to another server: each connects there when its stream breaks.
func (h *Herd) SetAddr(addr string) { h.Fleet.SetAddr(0, addr) }

// Complete is the number of proxies that hold every cluster.
func (h *Herd) Complete() int { return int(h.complete.Load()) }

// WaitComplete blocks until n proxies hold every cluster, or the timeout passes.
func (h *Herd) WaitComplete(n int, timeout time.Duration) error {
	err := h.completed.Wait(timeout, fmt.Sprintf("%d proxies holding every cluster", n), func() (bool, string) {
		c := h.Complete()
		return c >= n || h.aborted.Load() != nil, fmt.Sprintf("%d hold every cluster", c)
	})
	if why := h.aborted.Load(); err == nil && why != nil && h.Complete() < n {
		return fmt.Errorf("%d of %d proxies hold every cluster: %s", h.Complete(), n, *why)
	}
	return err
}

// Abort ends the herd's waits now, saying why (the server they wait on is gone).
func (h *Herd) Abort(why string) {
	h.aborted.Store(&why)
	h.completed.Wake()
}

// LastComplete is when the last proxy became complete.
func (h *Herd) LastComplete() time.Time {
	var last time.Time
	for _, p := range h.proxies {
		p.mu.Lock()
		if p.completeAt.After(last) {
			last = p.completeAt
		}
		p.mu.Unlock()
	}
	return last
}

// Timeline is, for each proxy, how long after start it first held a cluster and held every
// cluster (in proxy order; zero where it has not yet).
func (h *Herd) Timeline(start time.Time) (first, complete []time.Duration) {
	since := func(t time.Time) time.Duration {
		if t.IsZero() {
			return 0
		}
		return t.Sub(start)
	}
	for _, p := range h.proxies {
		p.mu.Lock()
		first, complete = append(first, since(p.firstAt)), append(complete, since(p.completeAt))
		p.mu.Unlock()
	}
	return first, complete
}
