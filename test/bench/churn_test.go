package bench

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// churnResult is what a steady stream of changes at one rate did.
type churnResult struct {
	rate    int
	changes int
	// latencies are, per change (in the order made), the time from the change to every proxy
	// complete when it was made holding it; missed counts the changes some proxy did not get
	// within a minute.
	latencies []time.Duration
	missed    int
	// byKind are the latencies of each kind of change.
	byKind map[string][]time.Duration
	// cores is the server's CPU over the stream, in cores; rss and heap its peak and live heap
	// after it.
	cores float64
	// clientCores is the benchmark's own process over the stream: the proxies and the changes.
	clientCores float64
	rss, heap   int64
	// bytes, resources and responses received by every proxy together over the stream.
	bytes, resources, responses int64
	// reads and writes are the server's read and write system calls over the stream.
	reads, writes int64
	took          time.Duration
}

// course is the p50 of each sixth of the changes, in order: how the latency went over the run.
func (r churnResult) course() []time.Duration {
	var out []time.Duration
	n := len(r.latencies) / 6
	for i := 0; n > 0 && i < 6; i++ {
		out = append(out, percentile(r.latencies[i*n:(i+1)*n], 0.5).Round(time.Millisecond))
	}
	return out
}

// trend is the p50 of the last third of the changes over the p50 of the first third: above 1 a
// backlog grows.
func (r churnResult) trend() float64 {
	n := len(r.latencies) / 3
	if n == 0 {
		return 1
	}
	first, last := percentile(r.latencies[:n], 0.5), percentile(r.latencies[len(r.latencies)-n:], 0.5)
	return float64(last) / float64(max(first, 1))
}

// churn makes changes at rate a second for d against a served herd: each turns an endpoint of
// one of the services every proxy shares ready or not (the next service in turn, skipping one
// whose previous change is still on its way), and follows it to every proxy complete then.
func churn(tb testing.TB, srv *herdServer, h *Herd, size Size, rate int, d time.Duration, kinds []string) churnResult {
	tb.Helper()
	res := churnResult{rate: rate, byKind: map[string][]time.Duration{}}
	// KRTEDS_HERD_CPUPROFILE: the server's CPU profile over the stream (the last rate's).
	_, _ = srv.stats("profile")
	defer func() { _, _ = srv.stats("profile?stop=1") }()
	// KRTEDS_HERD_HEAPPROFILE: the server's heap as the stream starts (suffix .churn-<rate>-start)
	// and ends (below): the allocations of the stream are the second's alloc_space less the first's.
	_, _ = srv.stats(fmt.Sprintf("heapprofile?suffix=.churn-%d-start", rate))
	cpu0, client0 := procCPU(srv.cmd.Process.Pid), procCPU(os.Getpid())
	reads0, writes0 := procSyscalls(srv.cmd.Process.Pid)
	bytes0, resources0, responses0 := h.Bytes.Load(), h.Resources.Load(), h.Responses.Load()
	var (
		mu      sync.Mutex
		busy    = map[int]bool{}
		lat     = map[int]time.Duration{}
		kindOf  = map[int]string{}
		wg      sync.WaitGroup
		errOnce sync.Once
		failed  error
	)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	start := time.Now()
	next := 0
	// The large Deployments are rolled, and only rolled; the small services take the other kinds.
	big := rolled(size)
	nextBig, k := 0, 0
	for seq := 0; time.Since(start) < d; seq++ {
		<-tick.C
		kind := kinds[k%len(kinds)]
		k++
		idx := -1
		mu.Lock()
		if kind == "roll" {
			for tries := 0; tries < len(big); tries++ {
				i := big[nextBig%len(big)]
				nextBig++
				if !busy[i] {
					idx, busy[i] = i, true
					break
				}
			}
		} else {
			for tries := 0; tries < size.Services; tries++ {
				i := flipService(size, next)
				next++
				if !busy[i] && !slices.Contains(big, i) {
					idx, busy[i] = i, true
					break
				}
			}
		}
		mu.Unlock()
		if idx < 0 {
			continue // every such service's change is still on its way: this tick makes none
		}
		wg.Add(1)
		go func(seq, idx int) {
			defer wg.Done()
			took, _, _, err := flipAndWait(srv, h, idx, kind)
			mu.Lock()
			defer mu.Unlock()
			delete(busy, idx)
			if err != nil {
				if _, missed := errors.AsType[*missedError](err); missed {
					res.missed++ // not asking the server why at each: the question costs it
					return
				}
				errOnce.Do(func() { failed = err })
				return
			}
			lat[seq], kindOf[seq] = took, kind
		}(seq, idx)
		res.changes++
	}
	wg.Wait()
	res.took = time.Since(start)
	srv.failIfKilled(tb, h)
	if failed != nil {
		tb.Fatalf("%d changes a second: %v", rate, failed)
	}
	seqs := make([]int, 0, len(lat))
	for s := range lat {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	for _, s := range seqs {
		res.latencies = append(res.latencies, lat[s])
		res.byKind[kindOf[s]] = append(res.byKind[kindOf[s]], lat[s])
	}
	res.cores = (procCPU(srv.cmd.Process.Pid) - cpu0).Seconds() / res.took.Seconds()
	reads1, writes1 := procSyscalls(srv.cmd.Process.Pid)
	res.reads, res.writes = reads1-reads0, writes1-writes0
	res.clientCores = (procCPU(os.Getpid()) - client0).Seconds() / res.took.Seconds()
	res.bytes, res.resources, res.responses = h.Bytes.Load()-bytes0, h.Resources.Load()-resources0, h.Responses.Load()-responses0
	if st, err := srv.stats("stats"); err == nil {
		res.rss, res.heap = max(st.RSS, st.PeakRSS), st.HeapLive
	}
	// KRTEDS_HERD_HEAPPROFILE: the server's heap at the end of each rate's stream, to that file
	// with the suffix .churn-<rate>.
	_, _ = srv.stats(fmt.Sprintf("heapprofile?suffix=.churn-%d", rate))
	return res
}

// procCPU is the CPU time a process has used (user and system; /proc/<pid>/stat, in ticks of
// 10 ms).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command (which may hold spaces) in parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// procSyscalls is the read and write system calls a process has made (/proc/<pid>/io: syscr,
// syscw; 0 where it cannot be read).
func procSyscalls(pid int) (reads, writes int64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "syscr":
			reads = n
		case "syscw":
			writes = n
		}
	}
	return reads, writes
}

// churnRates reads KRTEDS_CHURN_RATES (changes a second, comma-separated; default 10,30,100).
func churnRates() []int {
	var out []int
	for _, f := range strings.Split(os.Getenv("KRTEDS_CHURN_RATES"), ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = []int{10, 30, 100}
	}
	return out
}

// churnKinds reads KRTEDS_CHURN_KINDS: the kinds of change made in turn (comma-separated, of
// ready, replace, scale and roll: see changer.change; default ready).
func churnKinds(tb testing.TB) []string {
	var out []string
	for _, f := range strings.Split(os.Getenv("KRTEDS_CHURN_KINDS"), ",") {
		switch k := strings.TrimSpace(f); k {
		case "":
		case "ready", "replace", "scale", "roll":
			out = append(out, k)
		default:
			tb.Fatalf("KRTEDS_CHURN_KINDS: %q is not ready, replace, scale or roll", k)
		}
	}
	if len(out) == 0 {
		out = []string{"ready"}
	}
	return out
}

// byKindText is each kind's count, p50 and p99, for the log.
func (r churnResult) byKindText() string {
	var parts []string
	for _, k := range []string{"ready", "replace", "scale", "roll"} {
		if l := r.byKind[k]; len(l) > 0 {
			parts = append(parts, fmt.Sprintf("%s %d: p50 %v p99 %v", k, len(l), percentile(l, 0.5).Round(time.Millisecond), percentile(l, 0.99).Round(time.Millisecond)))
		}
	}
	return strings.Join(parts, "; ")
}

// churnFor reads KRTEDS_CHURN_SECONDS (each rate's stream; default 60).
func churnFor() time.Duration {
	if n, err := strconv.Atoi(os.Getenv("KRTEDS_CHURN_SECONDS")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return time.Minute
}

// serveHerd starts a server process and a herd of proxies, each asking for per clusters (0:
// all), and waits until every proxy holds every CLA it asks for.
func serveHerd(tb testing.TB, size Size, proxies, per int, delta bool, env ...string) (*herdServer, *Herd) {
	tb.Helper()
	srv := startHerdServer(tb, append(env, "KRTEDS_BENCH_SIZE="+size.Name)...)
	tb.Cleanup(srv.kill)
	h := NewHerd(size, proxies, per, delta)
	srv.herd.Store(h)
	tb.Cleanup(h.Close)
	if err := h.Start(srv.xds); err != nil {
		tb.Fatal(err)
	}
	err := h.WaitComplete(proxies, 10*time.Minute)
	srv.failIfKilled(tb, h)
	if err != nil {
		tb.Fatal(err)
	}
	return srv, h
}

// growRolled grows the services the churn rolls to their size (rollSizes), each change followed
// to every proxy, if the kinds roll any.
func growRolled(tb testing.TB, srv *herdServer, h *Herd, size Size, kinds []string) {
	tb.Helper()
	if !slices.Contains(kinds, "roll") {
		return
	}
	for _, i := range rolled(size) {
		if _, _, _, err := flipAndWait(srv, h, i, "grow"); err != nil {
			tb.Fatalf("growing service %d to roll it: %v", i, err)
		}
	}
}

// BenchmarkChurn: the proxies of the herd (KRTEDS_HERD_PROXIES, KRTEDS_HERD_CLUSTERS, delta
// unless KRTEDS_BENCH_PROTOCOL says otherwise) connected and complete against a server in its
// own process, then a steady stream of changes at each rate of KRTEDS_CHURN_RATES for
// KRTEDS_CHURN_SECONDS. Reports per rate the time from a change to every proxy holding it (p50,
// p99, max), its trend over the stream (the last third's p50 over the first's), the changes
// missed (some proxy without it a minute later), the server's cores, peak RSS and live heap,
// the bytes and resources each proxy received a second, and the server's CPU per resource
// delivered.
func BenchmarkChurn(b *testing.B) {
	size := CurrentSize()
	proxies, per := herdEnv(size)
	kinds := churnKinds(b)
	for i := 0; i < b.N; i++ {
		srv, h := serveHerd(b, size, proxies, per, Protocol() == "delta")
		growRolled(b, srv, h, size, kinds)
		for _, rate := range churnRates() {
			r := churn(b, srv, h, size, rate, churnFor(), kinds)
			at := fmt.Sprintf("@%d/s", rate)
			b.ReportMetric(ms(percentileOr(r.latencies, 0.5)), "ms-p50"+at)
			b.ReportMetric(ms(percentileOr(r.latencies, 0.99)), "ms-p99"+at)
			b.ReportMetric(ms(percentileOr(r.latencies, 1)), "ms-max"+at)
			b.ReportMetric(r.trend(), "trend"+at)
			b.ReportMetric(float64(r.missed), "missed"+at)
			b.ReportMetric(r.cores, "cores"+at)
			b.ReportMetric(r.clientCores, "client-cores"+at)
			b.ReportMetric(float64(r.rss>>20), "MB-rss"+at)
			b.ReportMetric(float64(r.heap>>20), "MB-heap"+at)
			b.ReportMetric(float64(r.resources)/float64(proxies)/r.took.Seconds(), "resources/proxy/s"+at)
			b.ReportMetric(float64(r.responses)/float64(proxies)/r.took.Seconds(), "responses/proxy/s"+at)
			b.ReportMetric(float64(r.bytes)/float64(proxies)/r.took.Seconds(), "B/proxy/s"+at)
			if r.resources > 0 {
				// The server's CPU per CLA delivered (a change to every proxy: one each), and per
				// response (changes folded into one response count once).
				b.ReportMetric(r.cores*r.took.Seconds()*1e6/float64(r.resources), "cpu-µs/delivery"+at)
				b.ReportMetric(r.cores*r.took.Seconds()*1e6/float64(r.responses), "cpu-µs/response"+at)
				if r.writes > 0 {
					// The server's system calls per response: a write (or more) and the ACK's read.
					b.ReportMetric(float64(r.writes)/float64(r.responses), "writes/response"+at)
					b.ReportMetric(float64(r.reads)/float64(r.responses), "reads/response"+at)
				}
			}
			b.Logf("%d changes a second for %v, %d proxies: %d changes, p50 %v, p99 %v, max %v, trend %.2f (p50 by sixths %v), %d missed; by kind: %s; server %.2f cores, RSS %d MB, heap %d MB",
				rate, r.took.Round(time.Second), proxies, r.changes, percentileOr(r.latencies, 0.5), percentileOr(r.latencies, 0.99), percentileOr(r.latencies, 1),
				r.trend(), r.course(), r.missed, r.byKindText(), r.cores, r.rss>>20, r.heap>>20)
		}
	}
}

// TestChurnSmall: a hundred delta proxies each asking for every cluster of the small mesh, then
// 20 changes a second for 3 s, of every kind in turn (a readiness flip, a Pod replaced with a new
// address, a service scaled up or back down, a Pod of a large Deployment rolled): every change
// reaches every proxy (none missed), and the server is measured doing it; the same of the floor
// (floor_test.go), against which krteds' figures are read.
func TestChurnSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("a server process and a hundred proxies")
	}
	for _, tc := range []struct {
		name string
		env  []string
	}{{"krteds", nil}, {"floor", []string{"KRTEDS_HERD_FLOOR=1"}}} {
		t.Run(tc.name, func(t *testing.T) {
			size := Sizes["small"]
			srv, h := serveHerd(t, size, 100, 0, true, tc.env...)
			kinds := []string{"ready", "replace", "scale", "roll"}
			growRolled(t, srv, h, size, kinds)
			r := churn(t, srv, h, size, 20, 3*time.Second, kinds)
			t.Logf("%d changes in %v: p50 %v, p99 %v, max %v, trend %.2f, by kind: %s; server %.2f cores", r.changes, r.took.Round(time.Millisecond),
				percentileOr(r.latencies, 0.5), percentileOr(r.latencies, 0.99), percentileOr(r.latencies, 1), r.trend(), r.byKindText(), r.cores)
			if r.missed > 0 || len(r.latencies) != r.changes {
				t.Fatalf("%d of %d changes reached every proxy, %d missed", len(r.latencies), r.changes, r.missed)
			}
			for _, k := range kinds {
				if len(r.byKind[k]) < 5 {
					t.Errorf("%d changes of kind %s reached every proxy, want at least 5", len(r.byKind[k]), k)
				}
			}
			if r.changes < 30 {
				t.Fatalf("only %d changes made in %v at 20 a second", r.changes, r.took)
			}
		})
	}
}
