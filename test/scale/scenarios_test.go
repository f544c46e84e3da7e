package scale

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/fleet"
	"github.com/krteds/krteds/test/scale/rig"
)

// The Deployments the scenarios move, besides the services' own.
const (
	scaler  = "scaler"  // scaled from 0
	rollout = "rollout" // rolled out, again and again
)

// judged is the scale rig with the judge: its view of the slices and of what every client holds
// (truth).
type judged struct {
	*rig.Rig
	truth *truth
}

// TestScale runs every scenario on the real control loop at the size KRTEDS_SCALE_SIZE names
// (run.sh sets it), checking what must hold and writing the figures to KRTEDS_SCALE_REPORT.
func TestScale(t *testing.T) {
	name := os.Getenv("KRTEDS_SCALE_SIZE")
	if name == "" {
		t.Skip("KRTEDS_SCALE_SIZE is not set: test/scale/run.sh small|medium|large runs this")
	}
	sz, ok := rig.Sizes[name]
	if !ok {
		t.Fatalf("KRTEDS_SCALE_SIZE=%s: not one of small, medium, large", name)
	}
	rep := &report{t: t, size: sz}
	defer rep.write()
	start := time.Now()

	r := &judged{Rig: rig.Start(t, sz)}
	r.BuildKrteds()
	rep.note("rig up in %v (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)", since(start))
	t0 := time.Now()
	r.CreateNodes()
	r.watchSlices()
	pods := r.CreateMesh(map[string]int32{scaler: 0, rollout: int32(sz.Rollout)})
	r.truth.updates.Await(t, 20*time.Minute, "every pod ready in the EndpointSlices", func() (bool, string) {
		ready := r.truth.readyTotal()
		return ready == pods, fmt.Sprintf("%d of %d endpoints ready", ready, pods)
	})
	rep.note("%d nodes and %d services with %d pods ready in the slices in %v", sz.Nodes, sz.Services+2, pods, since(t0))

	t0 = time.Now()
	for i := 0; i < sz.Replicas; i++ {
		r.StartReplica(i)
	}
	for _, rp := range r.Replicas {
		rp.WaitReady(5 * time.Minute)
	}
	rep.note("%d krteds replicas ready (graph synced) %v after starting", sz.Replicas, since(t0))
	r.apiLoad(rep, t0, time.Now()) // the start: one list (streamed over a watch) per kind
	r.SampleUsage()

	t0 = time.Now()
	f := r.startFleet()
	if ok, detail := r.truth.waitCurrent(5 * time.Minute); !ok {
		t.Fatalf("the fleet never held the slices' state: %s", detail)
	}
	rep.note("%d clients (%d delta, %d state of the world) subscribed to all %d clusters, every one current in %v",
		sz.Proxies, (sz.Proxies+1)/2, sz.Proxies/2, len(f.names), since(t0))
	r.checkVersions(f, rep, "after the first sync")

	// KRTEDS_SCALE_SCENARIOS (a comma-separated list of these names) runs some only.
	only := map[string]bool{}
	for _, n := range strings.Split(os.Getenv("KRTEDS_SCALE_SCENARIOS"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			only[n] = true
		}
	}
	for _, s := range []struct {
		name string
		run  func()
	}{
		{"idle", func() { r.idle(f, rep) }},
		{"flips", func() { r.flips(f, rep) }},
		{"scale", func() { r.scaleUp(f, rep) }},
		{"rollout", func() { r.rollingUpdate(f, rep, "v2") }},
		{"node", func() { r.nodeNotReady(f, rep) }},
		{"apiserver", func() { r.restartAPI(f, rep) }},
		{"kill", func() { r.killReplica(f, rep, "v3") }},
		{"restart", func() { r.rollingRestart(f, rep, "v4") }},
	} {
		if len(only) == 0 || only[s.name] {
			s.run()
		}
	}

	if errs := f.errors(); len(errs) > 0 {
		t.Errorf("clients failed to decode %d responses, e.g. %v", len(errs), errs[0])
	}
	rep.note("total %v", since(start))
}

func since(t time.Time) time.Duration { return time.Since(t).Round(10 * time.Millisecond) }

// report gathers the figures, per scenario, and writes them where KRTEDS_SCALE_REPORT says (and
// to the test log).
type report struct {
	t     *testing.T
	size  rig.Size
	lines []string
}

func (rep *report) note(format string, args ...any) {
	line := fmt.Sprintf(format, args...)
	rep.t.Log(line)
	rep.lines = append(rep.lines, "- "+line)
}

func (rep *report) section(title string) {
	rep.t.Log("== " + title)
	rep.lines = append(rep.lines, "", "### "+title, "")
}

func (rep *report) write() {
	p := os.Getenv("KRTEDS_SCALE_REPORT")
	if p == "" {
		return
	}
	hdr := fmt.Sprintf("## Scale rig, %s: %d services × %d pods (+%d rolled), %d nodes, %d clients, %d replicas\n",
		rep.size.Name, rep.size.Services, rep.size.PodsPerService, rep.size.Rollout, rep.size.Nodes, rep.size.Proxies, rep.size.Replicas)
	if rep.t.Failed() {
		hdr += "\n**FAILED** (see the test log)\n"
	}
	if err := os.WriteFile(p, []byte(hdr+strings.Join(rep.lines, "\n")+"\n"), 0o644); err != nil {
		rep.t.Errorf("writing the report: %v", err)
	}
}

// scenario is one measured stretch: when it ran, and the machine's CPU at its start.
type scenario struct {
	r          *judged
	f          *clients
	rep        *report
	name       string
	from       time.Time
	busy, all  int64
	checkMoves bool
	// self is the rig's own CPU at the start; converged each replica's convergence histogram,
	// programmed its network programming latency histogram, stages that of each stage.
	self       time.Duration
	converged  []map[float64]float64
	programmed []map[float64]float64
	stages     map[string][]map[float64]float64
	kinds      [2][]map[float64]float64
}

func (r *judged) scenario(f *clients, rep *report, name string) *scenario {
	rep.section(name)
	b, a := rig.Busy()
	sc := &scenario{r: r, f: f, rep: rep, name: name, from: time.Now(), busy: b, all: a, self: rig.SelfCPU()}
	sc.stages = map[string][]map[float64]float64{}
	for _, rp := range r.Replicas {
		sc.converged = append(sc.converged, rp.Convergence())
		sc.programmed = append(sc.programmed, rp.Programming())
		for k, kind := range programmingKinds {
			sc.kinds[k] = append(sc.kinds[k], rp.ProgrammingKind(kind))
		}
		for _, stage := range programmingStages {
			sc.stages[stage] = append(sc.stages[stage], rp.ProgrammingStage(stage))
		}
	}
	return sc
}

// end waits for every client to be current, then reports the scenario's figures and fails the
// test on what must not happen: an empty or partial CLA, a client not back on the current state
// within 5 s of its stream breaking, a delta client re-sent more than 1% of what it held.
func (sc *scenario) end() {
	r, rep := sc.r, sc.rep
	r.T.Helper()
	if ok, detail := r.truth.waitCurrent(2 * time.Minute); !ok {
		r.T.Errorf("%s: the clients did not catch up with the slices: %s", sc.name, detail)
	}
	to := time.Now()
	lags, unfinished := r.truth.lags(sc.from, to)
	if len(lags) > 0 {
		rep.note("slice change → every client holds it (beyond the rig's informer seeing the slice), over %d changes: p50 %v, p99 %v, max %v",
			len(lags), pct(lags, 50), pct(lags, 99), pct(lags, 100))
	}
	if unfinished > 0 {
		rep.note("%d slice states were superseded before every client held them", unfinished)
	}
	// Judge the CLAs that arrived up to a second ago (the rig has seen the slices around them).
	vs := r.truth.violations(to)
	empty := 0
	for _, v := range vs {
		if v.healthy == 0 {
			empty++
		}
	}
	rep.note("empty or partial CLAs received: %d (%d empty)", len(vs), empty)
	if late := r.truth.lateCLAs(); len(late) > 0 {
		rep.note("CLAs holding a state the slices had held but left more than %v before (late, not partial): %d, their lateness p50 %v, max %v", lagBehind, len(late), pct(late, 50), pct(late, 100))
	}
	for k, v := range vs {
		if k == 5 {
			break
		}
		r.T.Errorf("%s: client %d received a CLA of %s (version %s) with %d healthy endpoints at %s, lacking some of the %d the slices held ready (their Pods present) throughout from %v before to %v after (e.g. %s)",
			sc.name, v.client, v.svc, v.version, v.healthy, v.at.Format("15:04:05.000"), v.steady, lagBehind, lagAhead, strings.Join(v.account, "; "))
	}
	sc.reportMoves(to)
	sc.auditSelf()
	sc.compareProgramming(to)
	for i := range r.Replicas {
		w := r.UsageOver(i, sc.from, to)
		if w.Samples == 0 {
			rep.note("krteds-%d: no usage sample in the window (sampled each second)", i)
			continue
		}
		rep.note("krteds-%d: %.2f cores, peak RSS %s, peak heap %s; at most %d slice endpoints waiting for their Pod (sampled each second)", i, w.Cores, mib(w.PeakRSS), mib(w.PeakHeap), w.PeakPending)
	}
	for i, rp := range r.Replicas {
		var from map[float64]float64
		if i < len(sc.converged) {
			from = sc.converged[i]
		}
		p50, n := rig.HistogramQuantile(from, rp.Convergence(), 0.5)
		p99, _ := rig.HistogramQuantile(from, rp.Convergence(), 0.99)
		if n > 0 {
			rep.note("krteds-%d's own part (input change → the response carrying it handed to gRPC, its krteds_xds_convergence_seconds): %.0f responses, p50 ≤ %gs, p99 ≤ %gs", i, n, p50, p99)
		}
	}
	b, a := rig.Busy()
	if a > sc.all {
		rep.note("machine: %.0f%% of its %d cores busy over %v; the rig's own process (clients and judge) %.2f cores", 100*float64(b-sc.busy)/float64(a-sc.all), runtime.NumCPU(),
			to.Sub(sc.from).Round(time.Second), (rig.SelfCPU()-sc.self).Seconds()/to.Sub(sc.from).Seconds())
	}
}

// auditSelf holds each replica's own view of its clients (/debug/staleness) to the rig's judge,
// which has every client current: none is behind once the acknowledgements of what they hold
// have arrived (within 10 s).
func (sc *scenario) auditSelf() {
	r := sc.r
	for i, rp := range r.Replicas {
		var last xdsdebug.Staleness
		answered := false
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, ok := rp.Behind()
			if ok {
				last, answered = s, true
				if len(s.Behind) == 0 {
					break
				}
			}
			if time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond) // nothing signals the replica's view to the rig
		}
		switch {
		case !answered:
			sc.rep.note("krteds-%d: no answer from /debug/staleness", i)
		case len(last.Behind) > 0:
			b := last.Behind[0]
			r.T.Errorf("%s: the judge has every client current, krteds-%d reports %d types of its %d proxies behind (e.g. %s on %s since %s: %s)",
				sc.name, i, len(last.Behind), last.Proxies, b.Proxy, b.Type, b.Since.Format("15:04:05.000"), b.Reason)
		default:
			sc.rep.note("krteds-%d's own view (/debug/staleness): %d proxies, none behind, as the judge has them", i, last.Proxies)
		}
	}
}

// compareProgramming reports the network programming latency of slice changes (the slice's
// trigger time → a client holding the state), as the rig measured it at its clients and as the
// replicas measured it to the clients' ACKs, and fails when their p50 or p99 fall more than one
// of krteds' histogram buckets apart (its resolution is the comparison's error).
func (sc *scenario) compareProgramming(to time.Time) {
	r, rep := sc.r, sc.rep
	atClients := r.truth.programmingBetween(sc.from, to)
	from, now := map[float64]float64{}, map[float64]float64{}
	restarted := false
	for i, rp := range r.Replicas {
		cur := rp.Programming()
		if i < len(sc.programmed) {
			for b, n := range sc.programmed[i] {
				from[b] += n
				restarted = restarted || cur[b] < n
			}
		}
		for b, n := range cur {
			now[b] += n
		}
	}
	k50, n := rig.HistogramQuantile(from, now, 0.5)
	k99, _ := rig.HistogramQuantile(from, now, 0.99)
	if len(atClients) == 0 && n == 0 {
		return
	}
	rep.note("network programming latency of slice changes (trigger → client): the rig %d samples, p50 %v, p99 %v; krteds %.0f samples (to the ACK), p50 ≤ %gs, p99 ≤ %gs",
		len(atClients), pct(atClients, 50), pct(atClients, 99), n, k50, k99)
	var parts []string
	for _, stage := range programmingStages {
		from, now := sc.across(sc.stages[stage], func(rp *rig.Replica) map[float64]float64 { return rp.ProgrammingStage(stage) })
		p50, _ := rig.HistogramQuantile(from, now, 0.5)
		p99, _ := rig.HistogramQuantile(from, now, 0.99)
		parts = append(parts, fmt.Sprintf("%s ≤ %gs / %gs", stage, p50, p99))
	}
	rep.note("krteds' stages, p50 / p99: %s", strings.Join(parts, ", "))
	parts = parts[:0]
	for k, kind := range programmingKinds {
		from, now := sc.across(sc.kinds[k], func(rp *rig.Replica) map[float64]float64 { return rp.ProgrammingKind(kind) })
		p50, n := rig.HistogramQuantile(from, now, 0.5)
		p99, _ := rig.HistogramQuantile(from, now, 0.99)
		if n == 0 {
			parts = append(parts, kind+" none")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f samples ≤ %gs / %gs", kind, n, p50, p99))
	}
	rep.note("krteds' samples by the trigger's kind, p50 / p99: %s", strings.Join(parts, ", "))
	if restarted {
		rep.note("a replica restarted in the scenario: its samples before are lost with its process, the two are not compared")
		return
	}
	if len(atClients) < 20 || n < 20 {
		return
	}
	bounds := make([]float64, 0, len(now))
	for b := range now {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	bucket := func(v float64) int { return sort.SearchFloat64s(bounds, v) }
	for _, q := range []struct {
		name   string
		client time.Duration
		k      float64
	}{{"p50", pct(atClients, 50), k50}, {"p99", pct(atClients, 99), k99}} {
		if d := bucket(q.client.Seconds()) - bucket(q.k); d > 1 || d < -1 {
			r.T.Errorf("%s: the network programming latency's %s is %v at the rig's clients, ≤ %gs in krteds' histogram: more than a bucket apart",
				sc.name, q.name, q.client, q.k)
		}
	}
}

// across sums a histogram over the replicas, as it stood at the scenario's start (before, one per
// replica) and as read now.
func (sc *scenario) across(before []map[float64]float64, read func(*rig.Replica) map[float64]float64) (from, now map[float64]float64) {
	from, now = map[float64]float64{}, map[float64]float64{}
	for i, rp := range sc.r.Replicas {
		if i < len(before) {
			for b, n := range before[i] {
				from[b] += n
			}
		}
		for b, n := range read(rp) {
			now[b] += n
		}
	}
	return from, now
}

// programmingStages are the stages of krteds' network programming latency, trigger → ACK.
var programmingStages = []string{"cluster", "compute", "send", "proxy"}

// programmingKinds are the kinds of trigger the rig compares with its own (what it measures
// from the slices' stamps).
var programmingKinds = [2]string{collections.TriggerStamped, collections.TriggerReady}

// reportMoves reports the clients' moves in the scenario: how soon each was current again, and
// what delta clients were sent again.
func (sc *scenario) reportMoves(to time.Time) {
	r, rep := sc.r, sc.rep
	moves, clients := r.truth.movesBetween(sc.from, to)
	if len(moves) == 0 {
		return
	}
	var backs []time.Duration
	held, resent, notBack, planned := 0, 0, 0, 0
	for k, m := range moves {
		if m.planned {
			planned++
		}
		if m.back.IsZero() {
			notBack++
			r.T.Errorf("%s: client %d moved from krteds-%d to krteds-%d at %s (%s) and was never current again",
				sc.name, clients[k], m.from, m.to, m.broke.Format("15:04:05.000"), m.reason)
			continue
		}
		d := m.back.Sub(m.broke)
		backs = append(backs, d)
		if d > time.Second {
			r.T.Logf("%s: client %d moved krteds-%d → krteds-%d (planned %v) at %s: resumed %v later, current %v after the break (%s)",
				sc.name, clients[k], m.from, m.to, m.planned, m.broke.Format("15:04:05.000"), m.resumed.Sub(m.broke), d, m.reason)
		}
		if d > 5*time.Second && !m.planned {
			r.T.Errorf("%s: client %d was current again %v after its stream broke (must be ≤ 5 s)", sc.name, clients[k], d)
		}
		held += m.held
		resent += m.resent
	}
	rep.note("%d moves (%d planned by the rig): current again after the break p50 %v, p99 %v, max %v", len(moves), planned, pct(backs, 50), pct(backs, 99), pct(backs, 100))
	if held > 0 {
		rep.note("delta clients resumed holding %d resources; re-sent with the version they held: %d (%.3f%%)", held, resent, 100*float64(resent)/float64(held))
		if float64(resent) > 0.01*float64(held) {
			r.T.Errorf("%s: delta clients were re-sent %d of the %d resources they held (must be ≤ 1%%)", sc.name, resent, held)
		}
	}
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := (len(s)*p + 99) / 100
	k = min(max(k, 1), len(s))
	return s[k-1].Round(100 * time.Microsecond)
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

// checkVersions fails the test unless every client holds the same version of every cluster.
func (r *judged) checkVersions(f *clients, rep *report, when string) {
	r.T.Helper()
	differ, by := f.sameVersions()
	rep.note("%s: clients per replica %v; clusters whose version differs between clients: %d", when, by, len(differ))
	if len(differ) > 0 {
		r.T.Errorf("%s: clients on different replicas (or protocols) hold different versions of %d clusters, e.g. %v", when, len(differ), differ[:min(5, len(differ))])
	}
}

// idle measures the replicas at rest: their CPU and the API server load each puts on it.
func (r *judged) idle(f *clients, rep *report) {
	sc := r.scenario(f, rep, "Idle")
	d := 20 * time.Second
	if r.Size.Name != "small" {
		d = time.Minute
	}
	time.Sleep(d) // the figure is what happens over a stretch of nothing happening
	r.apiLoad(rep, sc.from, time.Now())
	sc.end()
}

// apiLoad reports each replica's requests to the API server over [from, to].
func (r *judged) apiLoad(rep *report, from, to time.Time) {
	var users []string
	for i := range r.Replicas {
		users = append(users, fmt.Sprintf("krteds-%d", i))
	}
	loads := r.APILoadOf(users, from, to)
	mins := to.Sub(from).Minutes()
	for _, u := range users {
		l := loads[u]
		var verbs []string
		for v, n := range l.ByVerb {
			verbs = append(verbs, fmt.Sprintf("%s %.1f", v, float64(n)/mins))
		}
		sort.Strings(verbs)
		var watching []string
		total := 0
		for res, n := range l.Watching {
			watching = append(watching, fmt.Sprintf("%s %d", res, n))
			total += n
		}
		sort.Strings(watching)
		if len(verbs) == 0 {
			verbs = []string{"none"}
		}
		rep.note("%s → API server over %v: requests per minute by verb [%s]; %d watches opened (%.1f/min), of which %d lists streamed over a watch (watch-list); watches held at the end %d [%s]",
			u, to.Sub(from).Round(100*time.Millisecond), strings.Join(verbs, ", "), l.WatchesOpened, float64(l.WatchesOpened)/mins, l.WatchLists, total, strings.Join(watching, ", "))
	}
}

// patchReady writes a pod's Ready condition, as a kubelet would on a readiness probe's change.
func (r *judged) patchReady(pod string, ready bool) {
	r.T.Helper()
	status := "False"
	if ready {
		status = "True"
	}
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":%q,"lastTransitionTime":%q}]}}`, status, time.Now().UTC().Format(time.RFC3339))
	if _, err := r.Admin.CoreV1().Pods(rig.Namespace).Patch(context.Background(), pod, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		r.T.Fatalf("patching %s Ready=%s: %v", pod, status, err)
	}
}

// flips turns pods not ready and ready again, one at a time, measuring the controller (the pod's
// Ready written → the rig's informer sees the slice) and krteds (→ every client holds it) apart.
func (r *judged) flips(f *clients, rep *report) {
	r.T.Helper()
	sc := r.scenario(f, rep, fmt.Sprintf("Readiness flips (%d pods, not ready then ready again, one at a time)", r.Size.Flips))
	var ctrl, krt []time.Duration
	for k := 0; k < r.Size.Flips; k++ {
		svc := rig.ServiceName((k * 7919) % r.Size.Services)
		pods := r.PodsOf(svc)
		if len(pods) == 0 {
			r.T.Fatalf("%s has no pods", svc)
		}
		p := pods[k%len(pods)]
		ip, _ := fleet.IPv4(p.Status.PodIP)
		for _, ready := range []bool{false, true} {
			t0 := time.Now()
			r.patchReady(p.Name, ready)
			t1, ok := r.truth.addressChanged(ip, ready, t0, time.Minute)
			if !ok {
				r.T.Fatalf("the slices never said %s (%s) ready=%v", p.Name, p.Status.PodIP, ready)
			}
			lag, ok := r.truth.waitState(svc, t0, time.Minute)
			if !ok {
				r.T.Fatalf("the clients never all held %s's change (%s ready=%v)", svc, p.Name, ready)
			}
			ctrl = append(ctrl, t1.Sub(t0))
			krt = append(krt, lag)
		}
	}
	rep.note("pod Ready written → slice seen by the rig (the controller's own latency): p50 %v, p99 %v", pct(ctrl, 50), pct(ctrl, 99))
	rep.note("slice seen → every client holds the CLA (krteds, all replicas): p50 %v, p99 %v, max %v", pct(krt, 50), pct(krt, 99), pct(krt, 100))
	if r.Size.Name != "small" && pct(krt, 99) > 100*time.Millisecond {
		r.T.Errorf("readiness flips: p99 %v beyond the slice write (must be ≤ 100 ms)", pct(krt, 99))
	}
	sc.end()
}

// scaleUp scales a Deployment from 0 to scaleTo.
func (r *judged) scaleUp(f *clients, rep *report) {
	r.T.Helper()
	sc := r.scenario(f, rep, fmt.Sprintf("Scale a Deployment 0 → %d", r.Size.ScaleTo))
	t0 := time.Now()
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, r.Size.ScaleTo)
	if _, err := r.Admin.AppsV1().Deployments(rig.Namespace).Patch(context.Background(), scaler, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		r.T.Fatal(err)
	}
	full, ok := r.truth.waitReadyCount(scaler, r.Size.ScaleTo, 10*time.Minute)
	if !ok {
		r.T.Fatalf("%s never had %d ready endpoints in the slices", scaler, r.Size.ScaleTo)
	}
	lag, ok := r.truth.waitHeld(full, time.Minute)
	if !ok {
		r.T.Errorf("the clients never all held %s's %d endpoints", scaler, r.Size.ScaleTo)
	}
	rep.note("every pod ready in the slices %v after the scale (scheduler, kwok, controllers); every client held all %d %v after that",
		full.at.Sub(t0).Round(time.Millisecond), r.Size.ScaleTo, lag)
	sc.end()
}

// startRollout changes the rollout Deployment's pod template to version v.
func (r *judged) startRollout(v string) time.Time {
	r.T.Helper()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"labels":{"version":%q}},"spec":{"containers":[{"name":"app","image":"app:%s"}]}}}}`, v, v)
	t0 := time.Now()
	if _, err := r.Admin.AppsV1().Deployments(rig.Namespace).Patch(context.Background(), rollout, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		r.T.Fatal(err)
	}
	return t0
}

// rolloutProgress is how many of the rollout Deployment's pods are of the new template, and
// whether the rollout is complete (every pod new and available, none old left).
func (r *judged) rolloutProgress() (updated int, done bool) {
	d, err := r.Admin.AppsV1().Deployments(rig.Namespace).Get(context.Background(), rollout, metav1.GetOptions{})
	if err != nil {
		return 0, false
	}
	s := d.Status
	want := int32(r.Size.Rollout)
	return int(s.UpdatedReplicas), s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want && s.ReadyReplicas == want
}

func (r *judged) waitRollout(timeout time.Duration) time.Time {
	r.T.Helper()
	rig.APIServer.Await(r.T, timeout, "the rollout complete", func() (bool, string) {
		u, done := r.rolloutProgress()
		return done, fmt.Sprintf("%d of %d updated", u, r.Size.Rollout)
	})
	return time.Now()
}

// rollingUpdate rolls the rollout Deployment to version v (maxUnavailable 0, maxSurge 25%: the
// slices never hold fewer ready endpoints than its replicas, so no client may either).
func (r *judged) rollingUpdate(f *clients, rep *report, v string) {
	r.T.Helper()
	sc := r.scenario(f, rep, fmt.Sprintf("Rolling update of a %d-pod Deployment (maxSurge 25%%, maxUnavailable 0)", r.Size.Rollout))
	profiled := r.Profile("rollout", 10*time.Second, -1)
	t0 := r.startRollout(v)
	t1 := r.waitRollout(20 * time.Minute)
	profiled()
	rep.note("rollout complete in the API %v after the template change", t1.Sub(t0).Round(time.Millisecond))
	r.apiLoad(rep, t0, t1)
	sc.end()
}

// nodeNotReady kills the kubelet of a node (the kwok that plays it alone): the node lifecycle
// controller marks it not ready and its pods not ready, the taint eviction controller evicts them
// (they tolerate it 2 s), the ReplicaSets replace them elsewhere.
func (r *judged) nodeNotReady(f *clients, rep *report) {
	r.T.Helper()
	sc := r.scenario(f, rep, "A node going NotReady (its kubelet killed), its pods going away")
	ctx := context.Background()
	node := rig.DoomedNode
	pods, err := r.Admin.CoreV1().Pods(rig.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		r.T.Fatal(err)
	}
	before := map[string]int{}
	var names []string
	for _, p := range pods.Items {
		// A Pod already shutting down (the last rollout's) is not ready in its slice already.
		if p.DeletionTimestamp != nil {
			continue
		}
		if ip, ok := fleet.IPv4(p.Status.PodIP); ok && slices.Contains(r.truth.readyOf(p.Labels["app"]), ip) {
			names = append(names, p.Name)
		}
		before[p.Labels["app"]] = len(r.truth.readyOf(p.Labels["app"]))
	}
	if len(names) == 0 {
		r.T.Fatalf("%s runs no pods", node)
	}
	t0 := time.Now()
	r.KillProcess("kwok-doomed")
	var tNode time.Time
	rig.APIServer.Await(r.T, 3*time.Minute, node+" not ready", func() (bool, string) {
		n, err := r.Admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
				tNode = time.Now()
				return true, ""
			}
		}
		return false, "still ready"
	})
	var tSlices time.Time
	for _, p := range names {
		at, ok := r.truth.podReadyChanged(p, false, t0, 3*time.Minute)
		if !ok {
			r.T.Fatalf("the slices never said %s not ready", p)
		}
		if at.After(tSlices) {
			tSlices = at
		}
	}
	r.truth.updates.Await(r.T, 5*time.Minute, "the pods replaced", func() (bool, string) {
		for svc, n := range before {
			if got := len(r.truth.readyOf(svc)); got < n {
				return false, fmt.Sprintf("%s: %d of %d ready", svc, got, n)
			}
		}
		return true, ""
	})
	tBack := time.Now()
	rep.note("%s (%d pods of %d services): not ready %v after its kubelet died (the controller's grace); its pods not ready in the slices %v later; every service back to its ready count %v after that",
		node, len(names), len(before), tNode.Sub(t0).Round(time.Second), tSlices.Sub(tNode).Round(time.Millisecond), tBack.Sub(tSlices).Round(time.Millisecond))
	// Nothing runs the node's pods any more: delete them and the node, as its owner would.
	zero := int64(0)
	for _, p := range pods.Items {
		_ = r.Admin.CoreV1().Pods(rig.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	if err := r.Admin.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil {
		r.T.Fatal(err)
	}
	sc.end()
}

// restartAPI kills the API server with pods changed just before, and changes more once it is
// back: every replica must relist, lose no update, and the clients end on the slices' state.
func (r *judged) restartAPI(f *clients, rep *report) {
	r.T.Helper()
	sc := r.scenario(f, rep, "The API server restarted (killed), pods changed around it")
	var before, after []string
	for k := 0; k < 5; k++ {
		before = append(before, r.PodsOf(rig.ServiceName(k * 3))[0].Name)
		after = append(after, r.PodsOf(rig.ServiceName(k*3 + 1))[0].Name)
	}
	for _, p := range before {
		r.patchReady(p, false)
	}
	cpu0 := r.cpus()
	t0 := time.Now()
	r.RestartAPIServer()
	t1 := time.Now()
	for _, p := range after {
		r.patchReady(p, false)
	}
	// The rig's own watch comes back on its backoff too: once it has seen the changes written
	// after the restart, it is back; until then a CLA may carry what the rig has not seen yet.
	rigBack := t1
	for _, p := range after {
		at, ok := r.truth.podReadyChanged(p, false, t1, 3*time.Minute)
		if !ok {
			r.T.Fatalf("after the API server's restart the rig's informer never saw %s not ready", p)
		}
		rigBack = maxTime(rigBack, at)
	}
	r.truth.blindFrom(t0, rigBack)
	for _, p := range before {
		r.patchReady(p, true)
	}
	if ok, detail := r.truth.waitCurrent(3 * time.Minute); !ok {
		r.T.Fatalf("after the API server's restart the clients never held the slices' state: %s", detail)
	}
	t2 := time.Now()
	// Each watch comes back on its own backoff: until all have, a replica joins fresh objects of
	// one kind with stale ones of another. The scenario ends when every replica watches again.
	back := r.waitWatching(t1, 3*time.Minute)
	t3 := time.Now()
	cpu1 := r.cpus()
	rep.note("API server down and back (ready) in %v; the rig's own informer saw a change written after it %v after it was back; every client held the slices' state %v after it was back",
		t1.Sub(t0).Round(time.Millisecond), rigBack.Sub(t1).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond))
	for i := range r.Replicas {
		rep.note("krteds-%d: every watch open again %v after the API server was back; CPU %v from the kill to then (the relist)", i, back[i].Round(time.Millisecond), (cpu1[i] - cpu0[i]).Round(10*time.Millisecond))
	}
	r.apiLoad(rep, t0, t3)
	r.checkSlicesAgain(rep)
	for _, p := range after {
		r.patchReady(p, true)
	}
	sc.end()
}

// watchedResources are the watches a krteds replica holds in this rig (no Istio CRDs installed:
// it watches the CRDs to notice them).
var watchedResources = []string{"customresourcedefinitions", "endpointslices", "namespaces", "nodes", "pods", "services"}

// waitWatching waits until every replica holds each of its watches again after the API server
// came back at since, read from the audit log; it returns, per replica, how long that took.
func (r *judged) waitWatching(since time.Time, timeout time.Duration) []time.Duration {
	r.T.Helper()
	var users []string
	for i := range r.Replicas {
		users = append(users, fmt.Sprintf("krteds-%d", i))
	}
	back := make([]time.Duration, len(users))
	rig.APIServer.Await(r.T, timeout, "every replica watching again after the API server's restart", func() (bool, string) {
		now := time.Now()
		loads := r.APILoadOf(users, since, now)
		var missing []string
		for i, u := range users {
			if back[i] > 0 {
				continue
			}
			var lack []string
			for _, res := range watchedResources {
				if loads[u].Watching[res] == 0 {
					lack = append(lack, res)
				}
			}
			if len(lack) == 0 {
				back[i] = now.Sub(since)
			} else {
				missing = append(missing, u+" lacks "+strings.Join(lack, ","))
			}
		}
		return len(missing) == 0, strings.Join(missing, "; ")
	})
	return back
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func (r *judged) cpus() []time.Duration {
	var out []time.Duration
	for _, rp := range r.Replicas {
		out = append(out, rp.Usage().CPU)
	}
	return out
}

// checkSlicesAgain lists the slices afresh and fails unless the rig's informer (which the
// clients are checked against) says the same: no update lost on the rig's side either.
func (r *judged) checkSlicesAgain(rep *report) {
	r.T.Helper()
	// Changes may still be in flight (Pods of the scenarios before settle): a lost update stays
	// lost, so the check is that they come to agree, and how soon.
	t0 := time.Now()
	var differ, of int
	// Nothing signals a LIST agreeing, and a LIST of every slice and Pod loads the API server: it
	// is polled every 500 ms, for 30 s at most (the check below reports what is left).
	_ = fixtures.PollingEvery(500*time.Millisecond, "a fresh LIST agreeing signals nothing").
		Wait(30*time.Second, "a fresh LIST agreeing with the informers", func() (bool, string) {
			differ, of = r.listDiffers()
			return differ == 0, fmt.Sprintf("%d of %d services differ", differ, of)
		})
	rep.note("a fresh LIST of the slices and Pods agrees with what the clients hold on %d of %d services (%v after the first LIST)", of-differ, of, since(t0))
	if differ > 0 {
		r.T.Errorf("%d services' ready endpoints differ between a fresh LIST and the informer the clients were checked against, 30 s on", differ)
	}
}

// listDiffers is how many services' ready addresses (whose Pod exists, as the judge counts them)
// differ between a fresh LIST of the slices and Pods and the rig's informers, of how many.
func (r *judged) listDiffers() (differ, of int) {
	r.T.Helper()
	list, err := r.Admin.DiscoveryV1().EndpointSlices(rig.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		r.T.Fatal(err)
	}
	pods, err := r.Admin.CoreV1().Pods(rig.Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		r.T.Fatal(err)
	}
	exists := map[string]bool{}
	for _, p := range pods.Items {
		exists[p.Name] = true
	}
	want := map[string][]uint32{}
	for _, s := range list.Items {
		svc := s.Labels[discoveryv1.LabelServiceName]
		if _, ok := want[svc]; !ok {
			want[svc] = nil
		}
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" && !exists[e.TargetRef.Name] {
				continue
			}
			if e.Conditions.Ready != nil && *e.Conditions.Ready && (e.Conditions.Terminating == nil || !*e.Conditions.Terminating) {
				for _, a := range e.Addresses {
					if ip, ok := fleet.IPv4(a); ok {
						want[svc] = append(want[svc], ip)
					}
				}
			}
		}
	}
	for svc, set := range want {
		slices.Sort(set)
		if !slices.Equal(slices.Compact(set), r.truth.readyOf(svc)) {
			differ++
		}
	}
	return differ, len(want)
}

// killReplica kills replica 0 with SIGKILL in the middle of a rollout: its clients move to the
// next replica, holding their versions.
func (r *judged) killReplica(f *clients, rep *report, v string) {
	r.T.Helper()
	sc := r.scenario(f, rep, "A replica killed (-9) during a rollout")
	moved := len(f.on(0))
	r.startRollout(v)
	rig.APIServer.Await(r.T, 10*time.Minute, "the rollout a quarter done", func() (bool, string) {
		u, _ := r.rolloutProgress()
		return u >= r.Size.Rollout/4, fmt.Sprintf("%d updated", u)
	})
	tKill := time.Now()
	r.Replicas[0].Kill()
	<-r.Replicas[0].Done
	if !r.truth.waitBack(time.Minute) {
		r.T.Errorf("the clients of the killed replica were not all current again within a minute")
	}
	tBack := time.Now()
	rep.note("krteds-0 killed with %d of the %d clients on it; every one current again on krteds-1 %v after the kill", moved, r.Size.Proxies, tBack.Sub(tKill).Round(time.Millisecond))
	r.waitRollout(20 * time.Minute)
	t0 := time.Now()
	r.StartReplica(0).WaitReady(5 * time.Minute)
	rep.note("krteds-0 started again: ready (synced, serving) in %v", since(t0))
	f.rebalance()
	if !r.truth.waitBack(time.Minute) {
		r.T.Errorf("rebalancing: the clients were not all current again within a minute")
	}
	sc.end()
	r.checkVersions(f, rep, "after the kill and rebalancing")
}

// rollingRestart restarts every replica in turn with SIGTERM, each back before the next, during a
// rollout, as a Deployment's rolling restart does.
func (r *judged) rollingRestart(f *clients, rep *report, v string) {
	r.T.Helper()
	sc := r.scenario(f, rep, "A rolling restart of every replica (SIGTERM, drain 2 s) during a rollout")
	r.startRollout(v)
	for i, rp := range r.Replicas {
		n := len(f.on(i))
		profiled := r.Profile(fmt.Sprintf("restart-%d", i), 10*time.Second, i)
		t0 := time.Now()
		rp.Terminate(30 * time.Second)
		t1 := time.Now()
		if !r.truth.waitBack(time.Minute) {
			r.T.Errorf("the clients of krteds-%d were not all current again within a minute of its exit", i)
		}
		t2 := time.Now()
		profiled()
		r.StartReplica(i).WaitReady(5 * time.Minute)
		rep.note("krteds-%d: exited %v after SIGTERM with %d clients; they were all current elsewhere %v after its exit; it was ready again %v later",
			i, t1.Sub(t0).Round(time.Millisecond), n, t2.Sub(t1).Round(time.Millisecond), since(t2))
	}
	r.waitRollout(20 * time.Minute)
	f.rebalance()
	if !r.truth.waitBack(time.Minute) {
		r.T.Errorf("rebalancing: the clients were not all current again within a minute")
	}
	sc.end()
	r.checkVersions(f, rep, "after the rolling restart and rebalancing")
}
