package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	discovery "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/test/fixtures"
)

// TestRolloutsUnderStarvation: 200 restarts of a 500-pod Deployment, interleaved with endpoint
// flips of other services, on a krteds with one CPU shared with busy goroutines, to 100
// proxies; after every restart each proxy holds the final CLA of the Deployment and of every
// flipped service. Long: it runs with KRTEDS_STRESS=1 (KRTEDS_STRESS_ROLLOUTS sets the count).
func TestRolloutsUnderStarvation(t *testing.T) {
	if os.Getenv("KRTEDS_STRESS") == "" {
		t.Skip("a long stress test: set KRTEDS_STRESS=1")
	}
	rollouts := 200
	if n, err := strconv.Atoi(os.Getenv("KRTEDS_STRESS_ROLLOUTS")); err == nil && n > 0 {
		rollouts = n
	}
	fixtures.Starve(t, 2, 20000)

	size := Sizes["small"]
	size.Proxies = 100
	m := Generate(size)
	ro := NewRollout(m, "rollout", 500)
	r := start(t, m, ro.Objects()...)
	defer r.stop()
	if err := r.fleet.Subscribe(ro.Cluster); err != nil {
		t.Fatal(err)
	}
	if _, err := r.fleet.WaitAll(10 * time.Minute); err != nil {
		t.Fatal(err)
	}
	slices := map[int]*discovery.EndpointSlice{}
	for _, s := range m.Slices {
		for i := 0; i < size.Services; i++ {
			if s.Labels["kubernetes.io/service-name"] == ServiceName(i) {
				slices[i] = s
			}
		}
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	start := time.Now()
	for n := 0; n < rollouts; n++ {
		flipped := map[int]bool{}
		ro.Restart(r.In.Apply, func() {
			if rnd.IntN(10) != 0 {
				return
			}
			// A plain service (its CLA is the same for every proxy).
			svc := 1 + rnd.IntN(size.Services-1)
			if svc%size.PreferCloseEvery == 0 {
				svc++
			}
			sl := slices[svc].DeepCopy()
			ready := !*sl.Endpoints[0].Conditions.Ready
			sl.Endpoints[0].Conditions = discovery.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: ptr(false)}
			slices[svc] = sl
			r.In.Apply(sl, false)
			flipped[svc] = true
		})
		if _, _, err := r.waitRolledOut(t, ro, 2*time.Minute); err != nil {
			if f, ferr := os.Create(filepath.Join(os.TempDir(), "krteds-stress-goroutines.txt")); ferr == nil {
				_ = pprof.Lookup("goroutine").WriteTo(f, 2)
				_ = f.Close()
				t.Logf("goroutines written to %s", f.Name())
			}
			t.Fatalf("restart %d: %v", n, err)
		}
		for svc := range flipped {
			if err := r.waitShared(t, ClusterName(svc), time.Minute); err != nil {
				t.Fatalf("restart %d, flipped %s: %v", n, ServiceName(svc), err)
			}
		}
		if n%20 == 19 {
			t.Logf("%d restarts in %v", n+1, time.Since(start).Round(time.Second))
		}
	}
}

// waitShared waits until every proxy holds the graph's current CLA of a plain cluster: the
// graph's CLA is waited for on the CLAs' events, the proxies' on their responses, and the two
// again while the graph moves on.
func (r *running) waitShared(tb testing.TB, cluster string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	w := fixtures.WakeOn(tb, fixtures.NewWaker(), r.CLAs)
	defer w.Close()
	current := func() string {
		if set := r.CLAs.GetKey(cluster); set != nil && set.Shared != nil {
			return set.Shared.VersionString()
		}
		return ""
	}
	for {
		var want string
		if err := w.Wait(time.Until(deadline), "a shared CLA of "+cluster+" in the graph", func() (bool, string) {
			want = current()
			return want != "", "none"
		}); err != nil {
			return err
		}
		_, err := r.fleet.WaitVersion(cluster, r.fleet.Subscribers(cluster), func(int) string { return want }, 2*time.Second)
		if err == nil && current() == want {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("the graph's CLA of %s kept changing for %v", cluster, timeout)
			}
			return err
		}
	}
}
