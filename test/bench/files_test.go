package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/test/rigs"
)

// filesMesh is the mesh written as a folder of manifests: one file with the namespace and the
// nodes, one file per service (the Service, its Pods and its EndpointSlices), one for a
// 500-pod Deployment and one for a 100-pod service. At the medium size: 1 002 services,
// 10 600 pods and 1 006 slices in 1 003 files.
type filesMesh struct {
	dir     string
	mesh    *Mesh
	rollout *Rollout
	big     *Rollout
	// slices of each service, as last written.
	slices map[int][]*discovery.EndpointSlice
	pods   map[int][]*corev1.Pod
}

func writeFilesMesh(tb testing.TB, size Size) *filesMesh {
	tb.Helper()
	m := Generate(size)
	f := &filesMesh{dir: tb.TempDir(), mesh: m, slices: map[int][]*discovery.EndpointSlice{}, pods: map[int][]*corev1.Pod{}}
	f.rollout = NewRollout(m, "rollout", 500)
	f.big = NewRollout(m, "big", 100)
	f.big.Service.Spec.ClusterIP = "10.97.0.2"
	for j, p := range m.Pods {
		i := j / size.EndpointsPerService
		f.pods[i] = append(f.pods[i], p)
	}
	for _, s := range m.Slices {
		var i int
		_, _ = fmt.Sscanf(s.Labels["kubernetes.io/service-name"], "svc-%05d", &i)
		f.slices[i] = append(f.slices[i], s)
	}
	var infra []any
	for _, n := range m.Namespaces {
		infra = append(infra, n)
	}
	for _, n := range m.Nodes {
		infra = append(infra, n)
	}
	f.write(tb, "00-infra.yaml", Manifest(infra...))
	for i := range m.Services {
		f.write(tb, f.serviceFile(i), f.serviceManifest(i))
	}
	f.write(tb, "zz-rollout.yaml", f.rollout.Manifest())
	f.write(tb, "zz-big.yaml", f.big.Manifest())
	return f
}

func (f *filesMesh) serviceFile(i int) string { return ServiceName(i) + ".yaml" }

func (f *filesMesh) serviceManifest(i int) []byte {
	objs := []any{f.mesh.Services[i]}
	for _, p := range f.pods[i] {
		objs = append(objs, p)
	}
	for _, s := range f.slices[i] {
		objs = append(objs, s)
	}
	return Manifest(objs...)
}

// write writes a file whole: to a hidden temporary name, then renamed into place.
func (f *filesMesh) write(tb testing.TB, name string, content []byte) {
	tmp := filepath.Join(f.dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, content, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, name)); err != nil {
		tb.Fatal(err)
	}
}

// servedFiles is krteds serving a folder: the composition the binary runs (the process layer's
// rig, rigs.App).
type servedFiles struct {
	*rigs.App
	fleet *Fleet
}

func serveFiles(tb testing.TB, dir string) *servedFiles {
	tb.Helper()
	return &servedFiles{App: rigs.StartApp(tb, app.Options{Config: collections.DefaultConfig(), Manifests: dir})}
}

// waitComputed waits until the graph has synced and holds a CLA set for every service, woken by
// the CLAs' events (and closed after).
func (s *servedFiles) waitComputed(tb testing.TB, services int) {
	tb.Helper()
	stop := make(chan struct{})
	defer close(stop)
	if !s.WaitUntilSynced(stop) {
		tb.Fatal("not synced")
	}
	w := fixtures.WakeOn(tb, fixtures.NewWaker(), s.Graph.CLAs)
	defer w.Close()
	w.Await(tb, 5*time.Minute, "a CLA set of every service", func() (bool, string) {
		n := len(s.Graph.CLAs.List())
		return n >= services, fmt.Sprintf("%d of %d", n, services)
	})
}

// BenchmarkFilesColdStart: a folder of manifests (at the medium size 1 002 services, 10 600 pods,
// 1 006 slices in 1 003 files) is read, the graph computes every CLA and xDS answers.
func BenchmarkFilesColdStart(b *testing.B) {
	size := CurrentSize()
	fm := writeFilesMesh(b, size)
	services := size.Services + 2
	var total time.Duration
	for i := 0; i < b.N; i++ {
		runtime.GC()
		t0 := time.Now()
		s := serveFiles(b, fm.dir)
		s.waitComputed(b, services)
		one := size
		one.Proxies, one.SubscribedServices = 1, 1
		fl, err := Connect(s.XDSAddr, one)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fl.WaitAll(time.Minute); err != nil {
			b.Fatal(err)
		}
		total += time.Since(t0)
		b.StopTimer()
		fl.Close()
		s.Stop()
		b.StartTimer()
	}
	b.ReportMetric(ms(total/time.Duration(b.N)), "ms-ready")
	b.ReportMetric(float64(size.Endpoints()+600), "pods")
}

// startFilesFleet serves the folder to the size's proxies, each also subscribed to the rollout.
func startFilesFleet(b *testing.B, fm *filesMesh, size Size) *servedFiles {
	s := serveFiles(b, fm.dir)
	s.waitComputed(b, size.Services+2)
	fl, err := Connect(s.XDSAddr, size)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(fl.Close)
	s.fleet = fl
	if err := fl.Subscribe(fm.rollout.Cluster); err != nil {
		b.Fatal(err)
	}
	if _, err := fl.WaitAll(10 * time.Minute); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkFilesRenameFlip: one service's file is rewritten (one endpoint turns ready or not
// ready) and renamed into place; the time until every subscribed proxy holds the new CLA.
func BenchmarkFilesRenameFlip(b *testing.B) {
	size := CurrentSize()
	fm := writeFilesMesh(b, size)
	s := startFilesFleet(b, fm, size)
	var samples []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		svc := (i * 7919) % size.Services
		cluster := ClusterName(svc)
		subs := s.fleet.Subscribers(cluster)
		old := s.fleet.Versions(cluster, subs)
		sl := fm.slices[svc][0].DeepCopy()
		ready := !*sl.Endpoints[0].Conditions.Ready
		sl.Endpoints[0].Conditions = discovery.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: ptr(false)}
		fm.slices[svc][0] = sl
		content := fm.serviceManifest(svc)
		t0 := time.Now()
		fm.write(b, fm.serviceFile(svc), content)
		last, err := s.fleet.WaitChanged(cluster, subs, old, time.Minute)
		if err != nil {
			b.Fatalf("flip %d of %s: %v", i, cluster, err)
		}
		samples = append(samples, last.Sub(t0))
	}
	b.StopTimer()
	b.ReportMetric(ms(percentile(samples, 0.5)), "p50-ms")
	b.ReportMetric(ms(percentile(samples, 0.99)), "p99-ms")
}

// BenchmarkFilesRollout500: a 500-pod Deployment's file is rewritten with every pod replaced by a
// new, ready one, and renamed into place; the time until every proxy holds the final CLA.
func BenchmarkFilesRollout500(b *testing.B) {
	size := CurrentSize()
	fm := writeFilesMesh(b, size)
	s := startFilesFleet(b, fm, size)
	var total, graph time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ro := fm.rollout
		ro.Gen++
		ro.Slices = ro.slicesOf(ro.Gen)
		content := ro.Manifest()
		w := fixtures.WakeOn(b, fixtures.NewWaker(), s.Graph.CLAs)
		t0 := time.Now()
		fm.write(b, "zz-rollout.yaml", content)
		deadline := time.Now().Add(5 * time.Minute)
		var want *collections.Resource
		final := ro.finalIn()
		w.Await(b, 5*time.Minute, "the rollout settled in the graph", func() (bool, string) {
			if set := s.Graph.CLAs.GetKey(ro.Cluster); final(set) {
				want = set.Shared
				graph += time.Since(t0)
				return true, ""
			}
			return false, "an earlier state"
		})
		w.Close()
		last, err := s.fleet.WaitVersion(ro.Cluster, s.fleet.All(), func(int) string { return want.VersionString() }, time.Until(deadline))
		if err != nil {
			b.Fatal(err)
		}
		total += last.Sub(t0)
	}
	b.StopTimer()
	b.ReportMetric(ms(total/time.Duration(b.N)), "ms-converged-after-rename")
	// When the graph held the final CLA (woken by the CLAs' events): the rest is the fan-out.
	b.ReportMetric(ms(graph/time.Duration(b.N)), "ms-graph-settled")
}

// BenchmarkFilesIdle: krteds serving a folder to its proxies, nothing changing: the CPU it uses
// per second.
func BenchmarkFilesIdle(b *testing.B) {
	size := CurrentSize()
	fm := writeFilesMesh(b, size)
	startFilesFleet(b, fm, size)
	const window = 2 * time.Second
	var cpu time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0 := cpuTime()
		time.Sleep(window)
		cpu += cpuTime() - c0
	}
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(b.N)/window.Seconds(), "cpu-ms/s")
}
