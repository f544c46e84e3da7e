package bench

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/fleet"
)

// Fleet is the benchmarks' proxies (test/fleet: real ADS clients, delta or state of the world,
// one gRPC connection each) that subscribe to EDS and ACK every response, recording per cluster
// the version and arrival time of the last CLA they received. Delta clients decode responses
// without the CLA bodies; state-of-the-world clients hash the bodies, their version. A stream
// that breaks is not opened again: the waits fail on it.
type Fleet struct {
	Size Size
	// Delta: the proxies speak incremental ADS (as Istio's sidecars do by default); else state
	// of the world, where every ACK repeats the whole subscription.
	Delta bool
	fl    *fleet.Fleet

	mu sync.Mutex
	// received wakes the waits after each response recorded, and when a stream fails.
	received *fixtures.Waker
	latest   []map[string]arrival
	// deliveries counts, per cluster, the CLAs every proxy received.
	deliveries map[string]int
	subs       [][]string
	errs       []error
}

type arrival struct {
	version string
	at      time.Time
}

// ProxyLocality is the locality of proxy p: proxies are spread evenly over Size.Classes zones.
func (s Size) ProxyLocality(p int) *core.Locality {
	region, zone := s.ZoneOf(p % s.Classes)
	return &core.Locality{Region: region, Zone: zone}
}

// Protocol is chosen by KRTEDS_BENCH_PROTOCOL: "sotw", or "delta" (the default).
func Protocol() string {
	if os.Getenv("KRTEDS_BENCH_PROTOCOL") == "sotw" {
		return "sotw"
	}
	return "delta"
}

// Connect starts every proxy, one after the other: one gRPC connection per proxy, one ADS stream
// each, one EDS request for its subscriptions.
func Connect(addr string, s Size) (*Fleet, error) {
	f := &Fleet{Size: s, Delta: Protocol() == "delta", deliveries: map[string]int{}, received: fixtures.NewWaker()}
	f.fl = fleet.New(fleet.Options{Addrs: []string{addr}, InTurn: true})
	for p := 0; p < s.Proxies; p++ {
		node := adsclient.Node{ID: f.NodeID(p), Namespace: meshNamespace, Locality: s.ProxyLocality(p)}
		f.latest = append(f.latest, map[string]arrival{})
		subs := s.Subscriptions(p)
		f.subs = append(f.subs, subs)
		if _, err := f.fl.Add(fleet.Spec{Node: node, Delta: f.Delta, Subs: slices.Clone(subs), Holder: &fleetProxy{f: f, p: p}}); err != nil {
			f.Close()
			return nil, err
		}
	}
	f.fl.Start()
	return f, nil
}

// fleetProxy records what proxy p receives.
type fleetProxy struct {
	f *Fleet
	p int
	// got is the response's resources, read before the fleet's lock is taken (scratch).
	got []arrivalOf
}

type arrivalOf struct{ name, version string }

func (h *fleetProxy) Held() map[string]string { return nil }

func (h *fleetProxy) Opened(map[string]string) {}

func (h *fleetProxy) Received(r *fleet.Response) {
	h.got = h.got[:0]
	for k := range r.Len() {
		name, v, _ := r.Resource(k)
		h.got = append(h.got, arrivalOf{name, v})
	}
	f := h.f
	f.mu.Lock()
	for _, a := range h.got {
		f.latest[h.p][a.name] = arrival{version: a.version, at: r.At}
		f.deliveries[a.name]++
	}
	f.mu.Unlock()
	f.received.Wake()
}

func (h *fleetProxy) Broke(b fleet.Break) {
	h.f.mu.Lock()
	h.f.errs = append(h.f.errs, b.Err)
	h.f.mu.Unlock()
	h.f.received.Wake()
}

// Deliveries is how many CLAs of the cluster the proxies have received, all together.
func (f *Fleet) Deliveries(cluster string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.deliveries[cluster]
}

// Subscribe adds a cluster to every proxy's subscription.
func (f *Fleet) Subscribe(cluster string) error {
	for p, fp := range f.fl.Proxies() {
		f.subs[p] = append(f.subs[p], cluster)
		if err := fp.Subscribe(cluster); err != nil {
			return err
		}
	}
	return nil
}

// Subscribers lists the proxies subscribed to cluster.
func (f *Fleet) Subscribers(cluster string) []int {
	var out []int
	for p, subs := range f.subs {
		for _, s := range subs {
			if s == cluster {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// NodeID is proxy p's node id.
func (f *Fleet) NodeID(p int) string {
	return fmt.Sprintf("sidecar~10.250.%d.%d~proxy-%d.bench~bench.svc.cluster.local", p>>8, p&255, p)
}

// All lists every proxy.
func (f *Fleet) All() []int {
	out := make([]int, len(f.subs))
	for p := range out {
		out[p] = p
	}
	return out
}

// Versions returns what each of the proxies last received for cluster.
func (f *Fleet) Versions(cluster string, proxies []int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, len(proxies))
	for i, p := range proxies {
		out[i] = f.latest[p][cluster].version
	}
	return out
}

// WaitAll blocks until every proxy has a CLA for each of its subscriptions, returning when the
// last one arrived.
func (f *Fleet) WaitAll(timeout time.Duration) (time.Time, error) {
	return f.wait(timeout, "every proxy holding a CLA of each of its subscriptions", func() (bool, time.Time, int) {
		var last time.Time
		for p, subs := range f.subs {
			if len(f.latest[p]) < len(subs) {
				return false, last, p
			}
			for _, a := range f.latest[p] {
				if a.at.After(last) {
					last = a.at
				}
			}
		}
		return true, last, 0
	}, func(p int) string {
		return fmt.Sprintf("proxy %d holds %d of its %d", p, len(f.latest[p]), len(f.subs[p]))
	})
}

// WaitChanged blocks until each proxy has received a version of cluster other than old[i],
// returning when the last one arrived.
func (f *Fleet) WaitChanged(cluster string, proxies []int, old []string, timeout time.Duration) (time.Time, error) {
	return f.wait(timeout, "every proxy subscribed to "+cluster+" holding a new version", func() (bool, time.Time, int) {
		var last time.Time
		for i, p := range proxies {
			a := f.latest[p][cluster]
			if a.version == old[i] {
				return false, last, p
			}
			if a.at.After(last) {
				last = a.at
			}
		}
		return true, last, 0
	}, func(p int) string {
		return fmt.Sprintf("proxy %d still holds version %s", p, f.latest[p][cluster].version)
	})
}

// WaitVersion blocks until each proxy's last CLA of cluster has the version want(p).
func (f *Fleet) WaitVersion(cluster string, proxies []int, want func(p int) string, timeout time.Duration) (time.Time, error) {
	return f.wait(timeout, "every proxy holding the version wanted of "+cluster, func() (bool, time.Time, int) {
		var last time.Time
		for _, p := range proxies {
			a := f.latest[p][cluster]
			if a.version != want(p) {
				return false, last, p
			}
			if a.at.After(last) {
				last = a.at
			}
		}
		return true, last, 0
	}, func(p int) string {
		return fmt.Sprintf("proxy %d holds version %s, not %s", p, f.latest[p][cluster].version, want(p))
	})
}

// wait waits, woken by each response, until cond (read under the fleet's lock) holds, and returns
// the time it gave; a failed stream ends it at once. cond names a proxy that lags, which a
// failure describes (only then: the checks allocate nothing in the allocations the benchmarks
// measure).
func (f *Fleet) wait(timeout time.Duration, what string, cond func() (ok bool, last time.Time, lagging int), describe func(p int) string) (time.Time, error) {
	var at time.Time
	var failed error
	var lagging int
	err := f.received.Wait(timeout, what, func() (bool, string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.errs) > 0 {
			failed = f.errs[0]
			return true, ""
		}
		ok, last, p := cond()
		at, lagging = last, p
		return ok, "a proxy lags, described after"
	})
	switch {
	case failed != nil:
		return time.Time{}, fmt.Errorf("an ADS stream failed: %w", failed)
	case err != nil:
		f.mu.Lock()
		defer f.mu.Unlock()
		return time.Time{}, fmt.Errorf("%w; %s", err, describe(lagging))
	}
	return at, nil
}

// Close ends every stream.
func (f *Fleet) Close() { f.fl.Close() }
