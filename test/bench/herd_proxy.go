package bench

import (
	"strconv"
	"sync"
	"time"

	"github.com/krteds/krteds/test/fleet"
)

// herdProxy is one proxy of a herd, its holder in the fleet: it asks for its window of the
// clusters, and holds one version per cluster (hold).
type herdProxy struct {
	h *Herd
	p int
	// subs are the clusters it asks for: Clusters[start], Clusters[start+1], … (wrapping).
	start int
	subs  []string

	mu   sync.Mutex
	held []uint64 // by position in subs
	n    int      // clusters held
	// firstAt is when the proxy first held a cluster, completeAt when it first held every
	// cluster (zero before).
	firstAt, completeAt time.Time
}

// pos is the position of cluster idx in the proxy's subscriptions (-1: not one of them).
func (p *herdProxy) pos(idx int) int {
	k := (idx - p.start + len(p.h.Clusters)) % len(p.h.Clusters)
	if k >= len(p.subs) {
		return -1
	}
	return k
}

// Held is the versions the proxy holds, which it says when it connects again.
func (p *herdProxy) Held() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return nil
	}
	out := make(map[string]string, p.n)
	for k, v := range p.held {
		if v != 0 {
			out[p.subs[k]] = strconv.FormatUint(v, 16)
		}
	}
	return out
}

func (p *herdProxy) Opened(map[string]string) {}

func (p *herdProxy) Broke(fleet.Break) {}

// Received holds the version of each CLA received (a version is a hex hash), and none of those
// removed.
func (p *herdProxy) Received(r *fleet.Response) {
	for k := range r.Len() {
		name, version, _ := r.Resource(k)
		v, _ := strconv.ParseUint(version, 16, 64)
		p.hold(name, v)
	}
	for _, name := range r.Removed() {
		p.hold(name, 0)
	}
}

// holds is the version the proxy holds of cluster idx (0: none, or not one of its clusters).
func (p *herdProxy) holds(idx int) uint64 {
	k := p.pos(idx)
	if k < 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[k]
}

// hold records the version the proxy holds of a cluster (0: none).
func (p *herdProxy) hold(name string, v uint64) {
	idx, ok := p.h.index[name]
	if !ok {
		return
	}
	k := p.pos(idx)
	if k < 0 {
		return
	}
	p.mu.Lock()
	was := p.held[k]
	p.held[k] = v
	switch {
	case was == 0 && v != 0:
		p.n++
		if p.firstAt.IsZero() {
			p.firstAt = time.Now()
		}
	case was != 0 && v == 0:
		p.n--
	}
	becameComplete := p.n == len(p.held) && p.completeAt.IsZero()
	if becameComplete {
		p.completeAt = time.Now()
	}
	p.mu.Unlock()
	if v != 0 && p.h.watching.Load() > 0 {
		if x, ok := p.h.watches.Load(idx); ok {
			if w := x.(*herdWatch); w.tracked[p.p] && v == w.want.Load() {
				w.arrive(p.p)
			}
		}
	}
	if becameComplete {
		p.h.complete.Add(1)
		p.h.completed.Wake()
	}
}
