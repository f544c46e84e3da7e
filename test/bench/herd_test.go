package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

// The herd: every proxy connecting at once to a krteds in a process of its own, so that its
// memory is measured apart from the proxies'. The server is this test binary run as
// TestHerdServer; the benchmark process runs the proxies (Herd).

// herdStats is what the server process reports of itself.
type herdStats struct {
	HeapLive int64 `json:"heapLive"`
	RSS      int64 `json:"rss"`
	PeakRSS  int64 `json:"peakRSS"`
	InFlight int64 `json:"inFlight"`
	// PeakInFlight is the server's own count of the most bytes ever in flight at once.
	PeakInFlight int64 `json:"peakInFlight"`
	Budget       int64 `json:"budget"`
	Streams      int   `json:"streams"`
	Throttled    int64 `json:"throttled"`
}

// procStatus reads a field of /proc/self/status in bytes (VmRSS, VmHWM).
func procStatus(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}

func heapLive() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// herdLimits are the server's limits, from KRTEDS_HERD_BUDGET, KRTEDS_HERD_RESPONSE_BYTES and
// KRTEDS_HERD_STREAM_RATE (defaults: the server's).
func herdLimits() xds.Limits {
	var l xds.Limits
	l.SendBudget, _ = strconv.ParseInt(os.Getenv("KRTEDS_HERD_BUDGET"), 10, 64)
	l.ResponseBytes, _ = strconv.Atoi(os.Getenv("KRTEDS_HERD_RESPONSE_BYTES"))
	l.StreamRate, _ = strconv.ParseFloat(os.Getenv("KRTEDS_HERD_STREAM_RATE"), 64)
	return l
}

// TestHerdServer is the herd's server process (only with KRTEDS_HERD_SERVER set): krteds' app
// over the mesh of KRTEDS_BENCH_SIZE as static objects, with a control port for the benchmark:
// /stats, /gc, /flip?service=N. It prints its addresses and serves until its standard input
// closes (the benchmark process ended).
func TestHerdServer(t *testing.T) {
	if os.Getenv("KRTEDS_HERD_SERVER") == "" {
		t.Skip("the herd benchmark's server process")
	}
	m := Generate(CurrentSize())
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	xl, dl, cl := listen(), listen(), listen()
	a := rigs.StartApp(t, app.Options{Config: collections.DefaultConfig(), Objects: m.Objects(), XDSListener: xl, DebugListener: dl, Limits: herdLimits()})
	if !a.WaitUntilSynced(nil) {
		t.Fatal("never synced")
	}
	// A flip's answer waits for its CLA on the CLAs' events.
	clas := fixtures.WakeOn(t, fixtures.NewWaker(), a.Graph.CLAs)
	changes := newChanger(m)
	var flipMu sync.Mutex // held by a change
	mux := http.NewServeMux()
	stats := func(w http.ResponseWriter, _ *http.Request) {
		inFlight, peak, budget := a.XDS.SendBudget()
		_ = json.NewEncoder(w).Encode(herdStats{HeapLive: heapLive(), RSS: procStatus("VmRSS"), PeakRSS: procStatus("VmHWM"),
			InFlight: inFlight, PeakInFlight: peak, Budget: budget, Streams: a.XDS.Streams()})
	}
	mux.HandleFunc("/stats", stats)
	mux.HandleFunc("/gc", func(w http.ResponseWriter, r *http.Request) { runtime.GC(); stats(w, r) })
	// KRTEDS_HERD_HEAPPROFILE: a heap profile once the herd is served, written to that file.
	mux.HandleFunc("/heapprofile", func(w http.ResponseWriter, r *http.Request) {
		if path := os.Getenv("KRTEDS_HERD_HEAPPROFILE"); path != "" {
			path += r.URL.Query().Get("suffix")
			runtime.GC()
			f, err := os.Create(path)
			if err == nil {
				_ = pprof.WriteHeapProfile(f)
				_ = f.Close()
			}
		}
		stats(w, r)
	})
	// The version of a service's shared CLA the graph holds now (0: none, or not shared).
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("service"))
		var v uint64
		if set := a.Graph.CLAs.GetKey(ClusterName(i)); set != nil && set.Shared != nil {
			v = set.Shared.Version
		}
		fmt.Fprintf(w, "%x", v)
	})
	mux.HandleFunc("/flip", func(w http.ResponseWriter, r *http.Request) {
		i, _ := strconv.Atoi(r.URL.Query().Get("service"))
		flipMu.Lock()
		defer flipMu.Unlock()
		// What changes, and how: changer.change.
		kind := r.URL.Query().Get("kind")
		before, ss, after, err := changes.change(i, kind)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		shared := func() *collections.Resource {
			if set := a.Graph.CLAs.GetKey(ClusterName(i)); set != nil {
				return set.Shared
			}
			return nil
		}
		version := func() uint64 {
			if r := shared(); r != nil {
				return r.Version
			}
			return 0
		}
		// A change of one slice makes one version of the CLA; growing writes several slices,
		// each its own version on the way: the answer is the last, with every endpoint.
		endpoints := -1
		if kind == "grow" {
			endpoints = endpointsOf(changes.slices[ServiceName(i)])
		}
		was := version()
		start := time.Now()
		for _, o := range before {
			a.Static.Apply(o, false)
		}
		for _, o := range ss {
			a.Static.Apply(o, false)
		}
		for _, o := range after {
			a.Static.Apply(o, true)
		}
		// The answer is the CLA's version once the graph has computed the change (a service
		// whose CLA is shared by every proxy: no PreferClose).
		// As long as a proxy is given to hold a change (flipAndWait): under a herd the graph's
		// part is measured, not cut short.
		if err := clas.Wait(time.Minute, "the flip's change computed", func() (bool, string) {
			r := shared()
			if endpoints >= 0 && (r == nil || r.Endpoints != endpoints) {
				return false, fmt.Sprintf("not yet %d endpoints", endpoints)
			}
			return version() != was, fmt.Sprintf("version %x still", was)
		}); err != nil {
			// What the graph's goroutines were doing, in the server's log, for whoever reads why.
			buf := make([]byte, 64<<20)
			buf = buf[:runtime.Stack(buf, true)]
			fmt.Fprintf(os.Stderr, "the flip of service %d was not computed in a minute; every goroutine:\n%s\n", i, buf)
			http.Error(w, err.Error()+" (the server's goroutines are in its log)", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "%x %d", version(), time.Since(start).Microseconds())
	})
	go func() { _ = http.Serve(cl, mux) }()
	// KRTEDS_HERD_CPUPROFILE: a CPU profile of the server, of the herd (phase "herd") or of the
	// flips once it is served ("idle"), written to that file.
	var profile *os.File
	mux.HandleFunc("/profile", func(w http.ResponseWriter, r *http.Request) {
		path := os.Getenv("KRTEDS_HERD_CPUPROFILE")
		if path == "" {
			return
		}
		if r.URL.Query().Get("stop") != "" {
			if profile != nil {
				pprof.StopCPUProfile()
				_ = profile.Close()
				profile = nil
			}
			return
		}
		if profile != nil {
			return
		}
		f, err := os.Create(path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		profile = f
	})
	defer func() {
		if profile != nil {
			pprof.StopCPUProfile()
			_ = profile.Close()
		}
	}()
	// KRTEDS_HERD_FLOOR: the proxies are served by the floor (floor_test.go), not by krteds.
	served := xl.Addr()
	if os.Getenv("KRTEDS_HERD_FLOOR") != "" {
		fl := listen()
		serveFloor(a.Graph.CLAs, fl)
		served = fl.Addr()
	}
	fmt.Printf("HERD-READY %s %s %s\n", served, cl.Addr(), dl.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// herdServer is the server process, sampled every 100 ms: its peaks, and a watchdog that kills
// it (and fails the benchmark) past maxRSS.
type herdServer struct {
	cmd          *exec.Cmd
	stdin        io.WriteCloser
	xds, control string
	debug        string
	// log is the file of the server's standard error.
	log          string
	peakRSS      atomic.Int64
	peakHeap     atomic.Int64
	peakInFlight atomic.Int64
	overBudget   atomic.Int64
	killed       atomic.Bool
	// herd, when set, is told when the watchdog kills the server: its waits end then.
	herd          atomic.Pointer[Herd]
	stopSampling  chan struct{}
	samplingEnded sync.WaitGroup
}

// failIfKilled fails the benchmark, saying so, when the watchdog killed the server: what fails
// next (a refused connection, proxies never complete) would hide why.
func (s *herdServer) failIfKilled(tb testing.TB, h *Herd) {
	tb.Helper()
	if s.killed.Load() {
		tb.Fatalf("the watchdog killed the server: over %d bytes of RSS (server; peak seen %d) or the benchmark over %d (its own); %d proxies were complete",
			herdMaxRSS("KRTEDS_HERD_MAX_RSS", 14<<30), s.peakRSS.Load(), herdMaxRSS("KRTEDS_HERD_MAX_CLIENT_RSS", 6<<30), h.Complete())
	}
}

// herdMaxRSS bounds the server process (KRTEDS_HERD_MAX_RSS, bytes; default 14 GiB) and
// herdMaxClientRSS the benchmark's own (KRTEDS_HERD_MAX_CLIENT_RSS; default 6 GiB).
func herdMaxRSS(env string, def int64) int64 {
	if n, err := strconv.ParseInt(os.Getenv(env), 10, 64); err == nil && n > 0 {
		return n
	}
	return def
}

func startHerdServer(tb testing.TB, env ...string) *herdServer {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHerdServer$", "-test.count=1", "-test.timeout=0")
	cmd.Env = append(append(os.Environ(), "KRTEDS_HERD_SERVER=1"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.CreateTemp("", "krteds-herd-server-*.log")
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	s := &herdServer{cmd: cmd, stdin: stdin, log: logf.Name(), stopSampling: make(chan struct{})}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "HERD-READY" {
				s.xds, s.control, s.debug = f[1], f[2], f[3]
				ready <- nil
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
		ready <- fmt.Errorf("the server process ended before it was ready (its log: %s)", logf.Name())
	}()
	select {
	case err := <-ready:
		if err != nil {
			tb.Fatal(err)
		}
	case <-time.After(10 * time.Minute):
		_ = cmd.Process.Kill()
		tb.Fatalf("the server process was not ready in 10 minutes (its log: %s)", logf.Name())
	}
	maxRSS := herdMaxRSS("KRTEDS_HERD_MAX_RSS", 14<<30)
	maxClientRSS := herdMaxRSS("KRTEDS_HERD_MAX_CLIENT_RSS", 6<<30)
	s.samplingEnded.Add(1)
	go func() {
		defer s.samplingEnded.Done()
		for {
			select {
			case <-s.stopSampling:
				return
			case <-time.After(100 * time.Millisecond):
			}
			st, err := s.stats("stats")
			if err != nil {
				continue
			}
			s.peak(st)
			if st.RSS > maxRSS || procStatus("VmRSS") > maxClientRSS {
				s.killed.Store(true)
				_ = s.cmd.Process.Kill()
				if h := s.herd.Load(); h != nil {
					h.Abort("the watchdog killed the server")
				}
				return
			}
		}
	}()
	tb.Cleanup(s.stop)
	return s
}

func (s *herdServer) peak(st herdStats) {
	for _, p := range []struct {
		a *atomic.Int64
		v int64
	}{{&s.peakRSS, max(st.RSS, st.PeakRSS)}, {&s.peakHeap, st.HeapLive}, {&s.peakInFlight, st.PeakInFlight}} {
		for old := p.a.Load(); p.v > old && !p.a.CompareAndSwap(old, p.v); old = p.a.Load() {
		}
	}
	if st.PeakInFlight > st.Budget {
		s.overBudget.Add(1)
	}
}

func (s *herdServer) stats(path string) (herdStats, error) {
	var st herdStats
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + s.control + "/" + path)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// flip changes a service — turns endpoint 0 ready or not (kind "" or "ready"), replaces its Pod
// with one of a new address ("replace"), or scales the service up or back down ("scale") — and
// returns the version of the service's CLA that carries the change (the service's CLA is shared
// by every proxy: not a PreferClose one), and how long the graph took to compute it.
func (s *herdServer) flip(service int, kind string) (uint64, time.Duration, error) {
	c := http.Client{Timeout: 75 * time.Second} // the server waits a minute for the graph
	resp, err := c.Get(fmt.Sprintf("http://%s/flip?service=%d&kind=%s", s.control, service, kind))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("flip %d: %s: %s (the server's log: %s)", service, resp.Status, b, s.log)
	}
	var v uint64
	var us int64
	if _, err := fmt.Sscanf(string(b), "%x %d", &v, &us); err != nil {
		return 0, 0, fmt.Errorf("flip %d: %q: %w", service, b, err)
	}
	return v, time.Duration(us) * time.Microsecond, nil
}

// flipAndWait changes service idx (a change of that kind: see flip) and waits until every proxy
// complete now holds the change: it returns how long that took, how long of it the graph took,
// and how many proxies it followed.
func flipAndWait(srv *herdServer, h *Herd, idx int, kind string) (took, graph time.Duration, tracked int, err error) {
	w := h.Watch(idx)
	defer h.Unwatch(w)
	at := time.Now()
	v, graph, err := srv.flip(idx, kind)
	if err != nil {
		return 0, 0, 0, err
	}
	h.Want(w, v)
	select {
	case <-w.done:
		return w.Latency(at), graph, w.Tracked(), nil
	case <-time.After(time.Minute):
		missing := w.Missing()
		held := make([]uint64, 0, min(len(missing), 10))
		for _, p := range missing[:cap(held)] {
			held = append(held, h.proxies[p].holds(idx))
		}
		return 0, 0, 0, &missedError{service: idx, missing: missing, tracked: w.Tracked(), srv: srv, want: v, held: held}
	}
}

// missedError is a flip that did not reach every complete proxy in a minute. Its message asks
// the server for its own view (/debug/staleness, a question to every stream): a caller that
// counts many misses, as the churn does, asks for one message, not one per miss.
type missedError struct {
	service int
	missing []int
	tracked int
	srv     *herdServer
	// want is the version the flip made; held what the first missing proxies hold of it.
	want uint64
	held []uint64
}

func (e *missedError) Error() string {
	return fmt.Sprintf("a flip of service %d did not reach %d of the %d complete proxies in a minute: %v, holding %x of the version %x the flip made (the graph's now: %s); the server's own view: %s",
		e.service, len(e.missing), e.tracked, e.missing[:min(len(e.missing), 10)], e.held, e.want, e.srv.version(e.service), e.srv.staleness())
}

// version is the version of a service's shared CLA the server's graph holds now, as text.
func (s *herdServer) version(service int) string {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%s/version?service=%d", s.control, service))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// staleness is the server's /debug/staleness, summed up: how many proxies it has behind, and
// the first few with their reasons.
func (s *herdServer) staleness() string {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + s.debug + "/debug/staleness")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	var st xdsdebug.Staleness
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return err.Error()
	}
	out := fmt.Sprintf("%d proxies, %d behind", st.Proxies, len(st.Behind))
	for _, b := range st.Behind[:min(len(st.Behind), 3)] {
		out += fmt.Sprintf("; %s %s since %s: %s", b.Proxy, b.Type, b.Since.Format("15:04:05.000"), b.Reason)
	}
	return out
}

// flipService is the n-th service the herd flips: one whose CLA every proxy shares.
func flipService(size Size, n int) int {
	i := 1 + n%(size.Services-1)
	if size.PreferCloseEvery > 0 && i%size.PreferCloseEvery == 0 {
		i++
	}
	return i % size.Services
}

// kill ends the server process at once (SIGKILL).
func (s *herdServer) kill() {
	close(s.stopSampling)
	s.samplingEnded.Wait()
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

func (s *herdServer) stop() {
	select {
	case <-s.stopSampling:
	default:
		close(s.stopSampling)
	}
	s.samplingEnded.Wait()
	_ = s.stdin.Close()
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// herdResult is one herd's figures.
type herdResult struct {
	took time.Duration
	// firstCLA is when each proxy first held a CLA, complete when it held every one (from the
	// herd's start).
	firstCLA, complete    []time.Duration
	steadyHeap, steadyRSS int64
	// servedHeap and servedRSS are the server's once every proxy is served (after a GC).
	servedHeap, servedRSS     int64
	peakHeap, peakRSS, budget int64
	peakInFlight              int64
	flips                     []time.Duration
	// flipGraph is the part of each flip the graph took (the change written → its CLA computed).
	flipGraph []time.Duration
	// idleFlips are flips once every proxy is complete.
	idleFlips []time.Duration
	// convergence: the server's change → response handed to gRPC, p50 and p99 (bucket bounds).
	convergenceP50, convergenceP99 float64
	coldBytes, restartBytes        int64
	restartResources               int64
	restartTook                    time.Duration
	throttled, retries             int64
	clientRSS                      int64
}

// runHerd connects proxies proxies, each asking for per clusters (0: all), to a server process
// at once; flips endpoints while the herd is served, measuring how soon the proxies already
// complete get them; then (restart) kills the server, starts another and lets the proxies come
// back with their versions.
func runHerd(tb testing.TB, size Size, proxies, per int, delta, restart bool, timeout time.Duration, env ...string) herdResult {
	tb.Helper()
	env = append(env, "KRTEDS_BENCH_SIZE="+size.Name)
	srv := startHerdServer(tb, env...)
	steady, err := srv.stats("gc")
	if err != nil {
		tb.Fatal(err)
	}
	var res herdResult
	res.steadyHeap, res.steadyRSS, res.budget = steady.HeapLive, steady.RSS, steady.Budget
	h := NewHerd(size, proxies, per, delta)
	srv.herd.Store(h)
	defer h.Close()
	phase := os.Getenv("KRTEDS_HERD_PROFILE_PHASE")
	if phase == "herd" {
		_, _ = srv.stats("profile")
	}
	start := time.Now()
	if err := h.Start(srv.xds); err != nil {
		tb.Fatal(err)
	}
	// Flips while the herd is served, each to the proxies complete when it happens; each endpoint
	// is flipped back after, so that the state is the mesh's again once the herd is served.
	flipsDone := make(chan struct{})
	go func() {
		defer close(flipsDone)
		for k := 0; h.Complete() < proxies; k++ {
			if srv.killed.Load() {
				return
			}
			time.Sleep(500 * time.Millisecond) // the flips' pace: real time passes between them
			idx := flipService(size, k)
			for range 2 {
				took, graph, tracked, err := flipAndWait(srv, h, idx, "")
				if err != nil {
					tb.Error(err)
					return
				}
				if tracked > 0 {
					res.flips = append(res.flips, took)
					res.flipGraph = append(res.flipGraph, graph)
				}
			}
		}
	}()
	if os.Getenv("KRTEDS_HERD_HEAPPROFILE") != "" {
		// A heap profile of the server half way through the herd, as well as once it is served.
		if err := h.WaitComplete(proxies/2, timeout); err == nil {
			_, _ = srv.stats("heapprofile?suffix=.half")
		}
	}
	err = h.WaitComplete(proxies, timeout)
	<-flipsDone
	srv.failIfKilled(tb, h)
	if err != nil {
		tb.Fatal(err)
	}
	res.took = h.LastComplete().Sub(start)
	res.firstCLA, res.complete = h.Timeline(start)
	if st, err := srv.stats("stats"); err == nil {
		srv.peak(st)
	}
	res.peakHeap, res.peakRSS, res.peakInFlight = srv.peakHeap.Load(), srv.peakRSS.Load(), srv.peakInFlight.Load()
	if n := srv.overBudget.Load(); n > 0 {
		tb.Errorf("%d samples had more bytes in flight than the budget", n)
	}
	// The steady state serving the herd: every proxy connected, nothing in flight.
	if st, err := srv.stats("heapprofile"); err == nil {
		res.servedHeap, res.servedRSS = st.HeapLive, st.RSS
	}
	// Flips once the herd is served: the same measure with nothing else going on.
	_, _ = srv.stats("profile?stop=1")
	if phase == "idle" {
		_, _ = srv.stats("profile")
	}
	for k := 0; k < 20; k++ {
		// Each service twice: flipped, then back (the state is the mesh's again after).
		took, _, _, err := flipAndWait(srv, h, flipService(size, 1000+k/2), "")
		if err != nil {
			tb.Fatal(err)
		}
		res.idleFlips = append(res.idleFlips, took)
	}
	_, _ = srv.stats("profile?stop=1")
	res.coldBytes = h.Bytes.Load()
	res.convergenceP50, res.convergenceP99, _ = srv.convergence()
	res.throttled = h.Refused(codes.ResourceExhausted)
	res.retries = h.Retries.Load()
	res.clientRSS = procStatus("VmRSS")
	if !restart {
		return res
	}
	// The server is killed and another started: the proxies come back with their versions.
	srv.kill()
	t0 := time.Now()
	next := startHerdServer(tb, env...)
	h.SetAddr(next.xds)
	before, beforeRes := h.Bytes.Load(), h.Resources.Load()
	fixtures.PollingEvery(50*time.Millisecond, "the server is another process, read through its control port; a tick of 50 ms loads it little while the proxies come back").
		Await(tb, timeout, "every proxy back on the restarted server, nothing in flight", func() (bool, string) {
			if next.killed.Load() {
				return true, "the watchdog killed the server"
			}
			st, err := next.stats("stats")
			if err != nil {
				return false, err.Error()
			}
			return st.Streams == proxies && st.InFlight == 0, fmt.Sprintf("%d of %d streams, %d bytes in flight", st.Streams, proxies, st.InFlight)
		})
	next.failIfKilled(tb, h)
	res.restartTook = time.Since(t0)
	res.restartBytes, res.restartResources = h.Bytes.Load()-before, h.Resources.Load()-beforeRes
	// A flip proves every proxy subscribes again (its bytes are not the restart's).
	if _, _, _, err := flipAndWait(next, h, flipService(size, 1), ""); err != nil {
		tb.Fatalf("after the restart: %v", err)
	}
	return res
}

// convergence is the server's own histogram of input change → response handed to gRPC, for
// CLAs sent to clients holding an older version (krteds_xds_convergence_seconds): its p50 and
// p99 as the buckets bound them.
func (s *herdServer) convergence() (p50, p99 float64, err error) {
	resp, err := http.Get("http://" + s.debug + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var bounds, counts []float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "krteds_xds_convergence_seconds_bucket{") || !strings.Contains(line, `type="ClusterLoadAssignment"`) {
			continue
		}
		le := line[strings.Index(line, `le="`)+4:]
		le = le[:strings.Index(le, `"`)]
		f := strings.Fields(line)
		n, _ := strconv.ParseFloat(f[len(f)-1], 64)
		bound, _ := strconv.ParseFloat(le, 64) // +Inf parses as infinity
		bounds, counts = append(bounds, bound), append(counts, n)
	}
	if len(counts) == 0 || counts[len(counts)-1] == 0 {
		return 0, 0, nil
	}
	total := counts[len(counts)-1]
	q := func(p float64) float64 {
		for i, c := range counts {
			if c >= p*total {
				return bounds[i]
			}
		}
		return bounds[len(bounds)-1]
	}
	return q(0.5), q(0.99), nil
}

func (r herdResult) report(b *testing.B) {
	b.ReportMetric(float64(r.took.Milliseconds()), "ms/herd")
	// Where the herd's time goes: the first answer's arrival, then the proxies completing.
	b.ReportMetric(ms(percentileOr(r.firstCLA, 0)), "ms-first-cla-min")
	b.ReportMetric(ms(percentileOr(r.firstCLA, 0.5)), "ms-first-cla-p50")
	b.ReportMetric(ms(percentileOr(r.complete, 0.5)), "ms-complete-p50")
	b.ReportMetric(float64(r.steadyHeap>>20), "MB-steady-heap")
	b.ReportMetric(float64(r.servedHeap>>20), "MB-served-heap")
	b.ReportMetric(float64(r.servedRSS>>20), "MB-served-rss")
	b.ReportMetric(float64(r.peakHeap>>20), "MB-peak-heap")
	b.ReportMetric(float64(r.peakRSS>>20), "MB-peak-rss")
	b.ReportMetric(float64(r.budget>>20), "MB-budget")
	b.ReportMetric(float64(r.peakInFlight>>20), "MB-peak-inflight")
	b.ReportMetric(float64(r.coldBytes>>20), "MB-sent")
	b.ReportMetric(float64(r.throttled), "throttled")
	b.ReportMetric(float64(r.clientRSS>>20), "MB-client-rss")
	if len(r.flips) > 0 {
		b.ReportMetric(ms(percentile(r.flips, 0.5)), "ms-flip-p50")
		b.ReportMetric(ms(percentile(r.flips, 0.99)), "ms-flip-p99")
		b.ReportMetric(ms(percentile(r.flips, 0.9)), "ms-flip-p90")
		b.ReportMetric(ms(percentile(r.flips, 1)), "ms-flip-max")
		b.ReportMetric(ms(percentile(r.flipGraph, 0.5)), "ms-flip-graph-p50")
		b.ReportMetric(ms(percentile(r.flipGraph, 0.99)), "ms-flip-graph-p99")
		b.ReportMetric(ms(percentile(r.idleFlips, 0.5)), "ms-idle-flip-p50")
		b.ReportMetric(ms(percentile(r.idleFlips, 0.99)), "ms-idle-flip-p99")
		b.ReportMetric(1000*r.convergenceP50, "ms-server-convergence-p50")
		b.ReportMetric(1000*r.convergenceP99, "ms-server-convergence-p99")
		b.ReportMetric(float64(len(r.flips)), "flips")
	}
	if r.restartTook > 0 {
		b.ReportMetric(float64(r.restartTook.Milliseconds()), "ms/restart")
		b.ReportMetric(100*float64(r.restartBytes)/float64(r.coldBytes), "%-restart-bytes")
	}
}

// herdEnv reads KRTEDS_HERD_PROXIES (default the size's proxies) and KRTEDS_HERD_CLUSTERS (each
// proxy's clusters; default all, as a proxy without a Sidecar asks).
func herdEnv(size Size) (proxies, per int) {
	proxies = size.Proxies
	if n, err := strconv.Atoi(os.Getenv("KRTEDS_HERD_PROXIES")); err == nil && n > 0 {
		proxies = n
	}
	per, _ = strconv.Atoi(os.Getenv("KRTEDS_HERD_CLUSTERS"))
	return proxies, per
}

// BenchmarkHerd: every proxy connects at once, each asking for every cluster of the mesh (as
// proxies without a Sidecar do), to a krteds in its own process; then it is killed and another
// started, the proxies coming back with their versions. Reports the time until every proxy
// holds every CLA, the server's steady and peak heap and RSS, the bytes in flight, the latency
// of endpoint flips to the proxies already complete while the herd is served, and the bytes a
// restart costs against a cold herd.
func BenchmarkHerd(b *testing.B) {
	size := CurrentSize()
	proxies, per := herdEnv(size)
	for i := 0; i < b.N; i++ {
		restart := Protocol() == "delta" && os.Getenv("KRTEDS_HERD_RESTART") != "0"
		r := runHerd(b, size, proxies, per, Protocol() == "delta", restart, 10*time.Minute)
		b.Logf("herd: %d proxies × %d clusters in %v; server heap %d → %d MB, RSS %d → %d MB (budget %d MB, peak in flight %d MB); %d MB sent; %d throttled, %d retries; flips p99 %v (the graph's part %v) over %d; restart %v, %.2f%% of the bytes",
			proxies, max(per, size.Services*boolInt(per == 0)), r.took.Round(time.Millisecond), r.steadyHeap>>20, r.peakHeap>>20, r.steadyRSS>>20, r.peakRSS>>20,
			r.budget>>20, r.peakInFlight>>20, r.coldBytes>>20, r.throttled, r.retries, percentileOr(r.flips, 0.99), percentileOr(r.flipGraph, 0.99), len(r.flips), r.restartTook.Round(time.Millisecond),
			100*float64(r.restartBytes)/float64(max(r.coldBytes, 1)))
		r.report(b)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func percentileOr(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return percentile(d, p)
}

// TestHerdSmall: a small herd against a server process with a small budget and small parts: a
// hundred delta proxies each asking for every cluster at once all complete, the bytes in flight
// never pass the budget, and a restart costs the proxies coming back almost nothing.
func TestHerdSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("a server process and a hundred proxies")
	}
	size := Sizes["small"]
	r := runHerd(t, size, 100, 0, true, true, 2*time.Minute,
		"KRTEDS_HERD_BUDGET="+strconv.Itoa(256<<10), "KRTEDS_HERD_RESPONSE_BYTES="+strconv.Itoa(16<<10), "KRTEDS_HERD_STREAM_RATE=200")
	t.Logf("100 proxies × %d clusters in %v; peak in flight %d KB of %d KB; %d KB sent; %d throttled; restart %v with %d bytes, %d resources (%.2f%%)",
		size.Services, r.took.Round(time.Millisecond), r.peakInFlight>>10, r.budget>>10, r.coldBytes>>10, r.throttled, r.restartTook.Round(time.Millisecond),
		r.restartBytes, r.restartResources, 100*float64(r.restartBytes)/float64(r.coldBytes))
	if r.peakInFlight > r.budget {
		t.Errorf("%d bytes in flight, over the budget of %d", r.peakInFlight, r.budget)
	}
	if r.restartBytes*100 > r.coldBytes {
		t.Errorf("the proxies coming back with their versions were sent %d bytes, over 1%% of the cold herd's %d", r.restartBytes, r.coldBytes)
	}
}
