package sources

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
)

// harness runs a manifests source over a folder and waits on its collections' events. It is the
// rig of the input layer: a source alone, below the graph, read as the graph reads it.
type harness struct {
	t    *testing.T
	dir  string
	f    *Files
	stop chan struct{}
	// changed wakes on every event of the source's collections.
	changed *fixtures.Waker
	seq     int
}

func newHarness(t *testing.T, dir string) *harness {
	t.Helper()
	return newHarnessWith(t, dir, FilesOptions{})
}

func newHarnessWith(t *testing.T, dir string, o FilesOptions) *harness {
	t.Helper()
	stop := test.NewStop(t)
	f, err := NewFiles(dir, krt.NewOptionsBuilder(stop, "", nil), o)
	if err != nil {
		t.Fatal(err)
	}
	w := fixtures.NewWaker()
	fixtures.WakeOn(t, w, f.static.Namespaces)
	fixtures.WakeOn(t, w, f.static.Nodes)
	fixtures.WakeOn(t, w, f.static.Services)
	fixtures.WakeOn(t, w, f.static.Pods)
	fixtures.WakeOn(t, w, f.static.EndpointSlices)
	fixtures.WakeOn(t, w, f.static.DestinationRules)
	fixtures.WakeOn(t, w, f.static.Sidecars)
	fixtures.WakeOn(t, w, f.problems)
	h := &harness{t: t, dir: dir, f: f, stop: stop, changed: w}
	go f.Run(stop)
	return h
}

// waitFor waits, on the source's collection events, until cond holds; a failure says which
// namespaces the source holds and the state of its files.
func (h *harness) waitFor(what string, cond func() bool) {
	h.t.Helper()
	h.changed.Await(h.t, 10*time.Second, what, func() (bool, string) {
		if cond() {
			return true, ""
		}
		var ns []string
		for _, n := range h.f.static.Namespaces.List() {
			ns = append(ns, n.Name)
		}
		return false, fmt.Sprintf("namespaces %v; files %+v", ns, h.f.Status())
	})
}

// barrier returns once every file change made before it has been applied: it writes a
// sentinel file, waits for its Namespace, removes it and waits for it to go. Events are applied
// in order, so the source has seen everything before the sentinel.
func (h *harness) barrier() {
	h.t.Helper()
	h.seq++
	name := fmt.Sprintf("sentinel-%d", h.seq)
	p := filepath.Join(h.dir, "zzz-"+name+".yaml")
	writeFile(h.t, p, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+name+"}\n")
	h.waitFor(name+" to appear", func() bool { return h.f.static.Namespaces.GetKey(name) != nil })
	if err := os.Remove(p); err != nil {
		h.t.Fatal(err)
	}
	h.waitFor(name+" to go", func() bool { return h.f.static.Namespaces.GetKey(name) == nil })
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeRename writes a file whole: to a temporary name, then renamed into place.
func writeRename(t *testing.T, p, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(p), "."+filepath.Base(p)+".tmp")
	writeFile(t, tmp, content)
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// contents is what the source's collections hold, by kind and key.
func contents(f *Files) map[string]any {
	out := map[string]any{}
	add := func(kind string, objs []any) {
		for _, o := range objs {
			out[kind+"/"+krt.GetKey(o)] = o
		}
	}
	add("Namespace", anys(f.static.Namespaces.List()))
	add("Node", anys(f.static.Nodes.List()))
	add("Service", anys(f.static.Services.List()))
	add("Pod", anys(f.static.Pods.List()))
	add("EndpointSlice", anys(f.static.EndpointSlices.List()))
	add("DestinationRule", anys(f.static.DestinationRules.List()))
	add("Sidecar", anys(f.static.Sidecars.List()))
	add("ServiceEntry", anys(f.static.ServiceEntries.List()))
	add("WorkloadEntry", anys(f.static.WorkloadEntries.List()))
	add("PeerAuthentication", anys(f.static.PeerAuthentications.List()))
	return out
}

func anys[T any](in []T) []any {
	out := make([]any, len(in))
	for i, v := range in {
		out[i] = v
	}
	return out
}

// sameObject compares two decoded objects (Istio specs with proto.Equal; a Pod or a slice
// without the times krteds stamps on it: when it saw it, and the file's change behind it, which
// is when the object last changed in the live source and the file's last write in a fresh load).
func sameObject(a, b any) bool {
	switch x := a.(type) {
	case *collections.Pod:
		y, ok := b.(*collections.Pod)
		return ok && x.Equals(y)
	case *collections.Slice:
		y, ok := b.(*collections.Slice)
		if !ok {
			return false
		}
		xc, yc := *x, *y
		xc.Trigger, xc.Seen, yc.Trigger, yc.Seen = 0, 0, 0, 0
		return reflect.DeepEqual(&xc, &yc)
	case *networkingclient.DestinationRule:
		y, ok := b.(*networkingclient.DestinationRule)
		return ok && reflect.DeepEqual(x.ObjectMeta, y.ObjectMeta) && proto.Equal(&x.Spec, &y.Spec)
	case *networkingclient.Sidecar:
		y, ok := b.(*networkingclient.Sidecar)
		return ok && reflect.DeepEqual(x.ObjectMeta, y.ObjectMeta) && proto.Equal(&x.Spec, &y.Spec)
	case *networkingclient.ServiceEntry:
		y, ok := b.(*networkingclient.ServiceEntry)
		return ok && reflect.DeepEqual(x.ObjectMeta, y.ObjectMeta) && proto.Equal(&x.Spec, &y.Spec)
	case *networkingclient.WorkloadEntry:
		y, ok := b.(*networkingclient.WorkloadEntry)
		return ok && reflect.DeepEqual(x.ObjectMeta, y.ObjectMeta) && proto.Equal(&x.Spec, &y.Spec)
	case *securityclient.PeerAuthentication:
		y, ok := b.(*securityclient.PeerAuthentication)
		return ok && reflect.DeepEqual(x.ObjectMeta, y.ObjectMeta) && proto.Equal(&x.Spec, &y.Spec)
	}
	return reflect.DeepEqual(a, b)
}

// matchesFreshLoad checks that the live source serves what a fresh load of the folder gives.
func (h *harness) matchesFreshLoad() {
	h.t.Helper()
	stop := make(chan struct{})
	defer close(stop)
	fresh, err := NewFiles(h.dir, krt.NewOptionsBuilder(stop, "", nil), FilesOptions{StartupWait: time.Millisecond})
	if err != nil {
		h.t.Fatal(err)
	}
	_ = fresh.w.close()
	got, want := contents(h.f), contents(fresh)
	for k, w := range want {
		g, ok := got[k]
		if !ok {
			h.t.Errorf("%s is in the folder but not served", k)
			continue
		}
		if !sameObject(g, w) {
			h.t.Errorf("%s served differs from the folder's", k)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			h.t.Errorf("%s is served but no longer in the folder", k)
		}
	}
	if h.t.Failed() {
		for _, st := range h.f.Status() {
			h.t.Logf("live source: %+v", st)
		}
		for _, st := range fresh.Status() {
			h.t.Logf("fresh load: %+v", st)
		}
		h.t.FailNow()
	}
}

func svcYAML(ns, name string, port int) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: %s}\nspec: {ports: [{name: http, port: %d}]}\n", name, ns, port)
}

func nsYAML(name string) string {
	return "apiVersion: v1\nkind: Namespace\nmetadata: {name: " + name + "}\n"
}

func (h *harness) service(ns, name string) *corev1.Service {
	s := h.f.static.Services.GetKey(ns + "/" + name)
	if s == nil {
		return nil
	}
	return *s
}

func (h *harness) problem(rel string) *collections.ObjectProblems {
	return h.f.problems.GetKey(KindManifestFile + "/" + rel)
}

func TestFilesFollowEdits(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "ns.yaml"), nsYAML("a"))
	writeFile(t, filepath.Join(dir, "svc.yaml"), svcYAML("a", "s", 80))
	h := newHarness(t, dir)
	if s := h.service("a", "s"); s == nil || s.Spec.Ports[0].Port != 80 {
		t.Fatalf("initial service %v", s)
	}

	writeFile(t, filepath.Join(dir, "svc.yaml"), svcYAML("a", "s", 81))
	h.waitFor("the edit", func() bool { s := h.service("a", "s"); return s != nil && s.Spec.Ports[0].Port == 81 })

	// A broken edit keeps what the file defined, and says so.
	writeFile(t, filepath.Join(dir, "svc.yaml"), "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: a\n")
	h.waitFor("the problem", func() bool { return h.problem("svc.yaml") != nil })
	if s := h.service("a", "s"); s == nil || s.Spec.Ports[0].Port != 81 {
		t.Fatalf("a broken edit changed the service: %v", s)
	}
	if p := h.problem("svc.yaml").Problems[0]; p.Reason != ReasonInvalidManifest || !strings.Contains(p.Detail, "previous objects are kept") {
		t.Fatalf("problem %+v", p)
	}
	// Fixed: the problem clears.
	writeFile(t, filepath.Join(dir, "svc.yaml"), svcYAML("a", "s", 82))
	h.waitFor("the fix", func() bool {
		s := h.service("a", "s")
		return s != nil && s.Spec.Ports[0].Port == 82 && h.problem("svc.yaml") == nil
	})

	// A same-size edit whose modification time is kept (cp -p, rsync) is seen.
	tmp := filepath.Join(t.TempDir(), "svc.yaml")
	writeFile(t, tmp, svcYAML("a", "s", 83))
	old, _ := os.Stat(filepath.Join(dir, "svc.yaml"))
	_ = os.Chtimes(tmp, old.ModTime(), old.ModTime())
	if err := os.Rename(tmp, filepath.Join(dir, "svc.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the same-size edit", func() bool { s := h.service("a", "s"); return s != nil && s.Spec.Ports[0].Port == 83 })

	// Removing the file removes its objects.
	if err := os.Remove(filepath.Join(dir, "svc.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the removal", func() bool { return h.service("a", "s") == nil })
	h.matchesFreshLoad()
}

func TestFilesSkipWhatIsNotARegularFileInTheFolder(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "elsewhere.yaml"), nsYAML("outside"))
	writeFile(t, filepath.Join(dir, "ns.yaml"), nsYAML("a"))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, filepath.Join(outside, "elsewhere.yaml"), filepath.Join(dir, "outside.yaml"))
	mustSymlink(t, "/dev/zero", filepath.Join(dir, "zero.yaml"))
	mustSymlink(t, outside, filepath.Join(dir, "folder.yaml"))
	mustSymlink(t, filepath.Join(dir, "loop2.yaml"), filepath.Join(dir, "loop1.yaml"))
	mustSymlink(t, filepath.Join(dir, "loop1.yaml"), filepath.Join(dir, "loop2.yaml"))
	mustSymlink(t, filepath.Join(dir, "ns.yaml"), filepath.Join(dir, "inside.yaml"))

	h := newHarness(t, dir)
	for file, reason := range map[string]string{
		"fifo.yaml": ReasonNotRegular, "outside.yaml": ReasonSymlinkOutside, "zero.yaml": ReasonSymlinkOutside,
		"folder.yaml": ReasonSymlinkOutside, "loop1.yaml": ReasonSymlinkBroken, "loop2.yaml": ReasonSymlinkBroken,
	} {
		p := h.problem(file)
		if p == nil || p.Problems[0].Reason != reason {
			t.Errorf("%s: problem %+v, want %s", file, p, reason)
		}
	}
	if h.f.static.Namespaces.GetKey("outside") != nil {
		t.Error("a symlink out of the folder was followed")
	}
	// A symlink inside the folder is read: it defines the same Namespace as ns.yaml, which sorts
	// last and wins; inside.yaml is told so.
	if p := h.problem("inside.yaml"); p == nil || p.Problems[0].Reason != ReasonDuplicateObject || !strings.Contains(p.Problems[0].Detail, "ns.yaml") {
		t.Errorf("inside.yaml: %+v", p)
	}
	// The source still follows edits: nothing blocked on the FIFO.
	writeFile(t, filepath.Join(dir, "b.yaml"), nsYAML("b"))
	h.waitFor("b", func() bool { return h.f.static.Namespaces.GetKey("b") != nil })

	// A symlinked folder inside the folder is not followed either (its files are read once).
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, filepath.Join(dir, "sub"), filepath.Join(dir, "subdir.yaml"))
	h.waitFor("the symlinked folder's problem", func() bool { return h.problem("subdir.yaml") != nil })
	if p := h.problem("subdir.yaml"); p.Problems[0].Reason != ReasonSymlinkDirectory {
		t.Errorf("subdir.yaml: %+v", p)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func TestFilesSizeCap(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "big.yaml"), nsYAML("big")+"# "+strings.Repeat("x", 200)+"\n")
	stop := test.NewStop(t)
	f, err := NewFiles(dir, krt.NewOptionsBuilder(stop, "", nil), FilesOptions{MaxFileBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	if f.static.Namespaces.GetKey("big") != nil {
		t.Fatal("a file over the cap was read")
	}
	if p := f.problems.GetKey(KindManifestFile + "/big.yaml"); p == nil || p.Problems[0].Reason != ReasonTooLarge {
		t.Fatalf("problem %+v", p)
	}
}

func TestFilesSameObjectInTwoFilesLastWins(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), svcYAML("x", "s", 80))
	writeFile(t, filepath.Join(dir, "b.yaml"), svcYAML("x", "s", 81))
	h := newHarness(t, dir)
	if s := h.service("x", "s"); s.Spec.Ports[0].Port != 81 {
		t.Fatalf("b.yaml sorts last and must win: %d", s.Spec.Ports[0].Port)
	}
	if p := h.problem("a.yaml"); p == nil || !strings.Contains(p.Problems[0].Detail, "Service/x/s is also defined in b.yaml, which wins") {
		t.Fatalf("a.yaml: %+v", p)
	}
	// The winner goes: the other copy is served, and the warning clears.
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("a.yaml's copy", func() bool {
		s := h.service("x", "s")
		return s != nil && s.Spec.Ports[0].Port == 80 && h.problem("a.yaml") == nil
	})
}

func TestFilesFolderChanges(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "sub", "deep", "a.yaml"), nsYAML("a"))
	writeFile(t, filepath.Join(dir, ".hidden", "h.yaml"), nsYAML("hidden"))
	writeFile(t, filepath.Join(dir, "notes.txt"), nsYAML("txt"))
	h := newHarness(t, dir)
	if h.f.static.Namespaces.GetKey("a") == nil || h.f.static.Namespaces.GetKey("hidden") != nil || h.f.static.Namespaces.GetKey("txt") != nil {
		t.Fatalf("initial: %v", contents(h.f))
	}
	// A new folder with a file in it.
	writeFile(t, filepath.Join(dir, "new", "b.yaml"), nsYAML("b"))
	h.waitFor("b", func() bool { return h.f.static.Namespaces.GetKey("b") != nil })
	// A folder removed takes its files with it.
	if err := os.RemoveAll(filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("a to go", func() bool { return h.f.static.Namespaces.GetKey("a") == nil })
	// A file replaced by a folder of the same name, and back.
	writeFile(t, filepath.Join(dir, "c.yaml"), nsYAML("c"))
	h.waitFor("c", func() bool { return h.f.static.Namespaces.GetKey("c") != nil })
	_ = os.Remove(filepath.Join(dir, "c.yaml"))
	writeFile(t, filepath.Join(dir, "c.yaml", "d.yaml"), nsYAML("d"))
	h.waitFor("d instead of c", func() bool {
		return h.f.static.Namespaces.GetKey("c") == nil && h.f.static.Namespaces.GetKey("d") != nil
	})
	_ = os.RemoveAll(filepath.Join(dir, "c.yaml"))
	writeFile(t, filepath.Join(dir, "c.yaml"), nsYAML("c"))
	h.waitFor("c instead of d", func() bool {
		return h.f.static.Namespaces.GetKey("c") != nil && h.f.static.Namespaces.GetKey("d") == nil
	})
	h.barrier()
	h.matchesFreshLoad()
}

// A ConfigMap volume: files are symlinks through "..data", which is swapped atomically.
func TestFilesConfigMapVolumeSwap(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "..v1", "mesh.yaml"), nsYAML("v1"))
	mustSymlink(t, "..v1", filepath.Join(dir, "..data"))
	mustSymlink(t, filepath.Join("..data", "mesh.yaml"), filepath.Join(dir, "mesh.yaml"))
	h := newHarness(t, dir)
	if h.f.static.Namespaces.GetKey("v1") == nil {
		t.Fatal("initial")
	}
	writeFile(t, filepath.Join(dir, "..v2", "mesh.yaml"), nsYAML("v2"))
	mustSymlink(t, "..v2", filepath.Join(dir, "..data_tmp"))
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("v2", func() bool {
		return h.f.static.Namespaces.GetKey("v2") != nil && h.f.static.Namespaces.GetKey("v1") == nil
	})
}

// A writer pausing half-way through a file is not read until it closes the file; at startup
// the source waits for it.
func TestFilesHalfWrittenFileIsNotRead(t *testing.T) {
	dir := t.TempDir()
	full := nsYAML("a") + "---\n" + nsYAML("b")
	half := full[:len(nsYAML("a"))+4]
	w, err := os.Create(filepath.Join(dir, "m.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString(half); err != nil {
		t.Fatal(err)
	}
	started := make(chan *Files)
	go func() {
		stop := test.NewStop(t)
		f, err := NewFiles(dir, krt.NewOptionsBuilder(stop, "", nil), FilesOptions{})
		if err != nil {
			t.Error(err)
		}
		started <- f
	}()
	select {
	case <-started:
		t.Fatal("startup did not wait for the writer")
	case <-time.After(100 * time.Millisecond): // the writer pauses
	}
	if _, err := w.WriteString(full[len(half):]); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	f := <-started
	if f.static.Namespaces.GetKey("a") == nil || f.static.Namespaces.GetKey("b") == nil {
		t.Fatalf("startup read a half-written file: %v", contents(f))
	}

	// Live: an in-place rewrite that pauses is applied once, whole.
	h := newHarness(t, dir)
	seen := make(chan []string, 16)
	h.f.static.Namespaces.RegisterBatch(func(evs []krt.Event[*corev1.Namespace]) {
		var names []string
		for _, e := range evs {
			names = append(names, e.Latest().Name)
		}
		seen <- names
	}, false)
	w, err = os.OpenFile(filepath.Join(dir, "m.yaml"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	next := nsYAML("c") + "---\n" + nsYAML("d")
	_, _ = w.WriteString(next[:10])
	h.barrier() // the source has had every chance to read the half-written file
	if h.f.static.Namespaces.GetKey("a") == nil {
		t.Fatal("the half-written file was applied")
	}
	_, _ = w.WriteString(next[10:])
	_ = w.Close()
	h.waitFor("c and d", func() bool {
		return h.f.static.Namespaces.GetKey("c") != nil && h.f.static.Namespaces.GetKey("d") != nil && h.f.static.Namespaces.GetKey("a") == nil
	})
}

func TestFilesLargeFiles(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := 0; i < 10000; i++ {
		fmt.Fprintf(&b, "---\napiVersion: v1\nkind: Service\nmetadata: {name: s%d, namespace: big}\nspec: {ports: [{name: http, port: 80}]}\n", i)
	}
	writeFile(t, filepath.Join(dir, "big.yaml"), b.String())
	h := newHarness(t, dir)
	if n := len(h.f.static.Services.List()); n != 10000 {
		t.Fatalf("%d services", n)
	}
	if err := os.Remove(filepath.Join(dir, "big.yaml")); err != nil {
		t.Fatal(err)
	}
	h.waitFor("every service to go", func() bool { return len(h.f.static.Services.List()) == 0 })
}

// A symlink inside the folder follows its target's edits; a file replaced by something that is
// not a manifest is reported until it is a manifest again.
func TestFilesSymlinkTargetEditsAndReplacedFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "real", "t.yaml"), "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: x}\n")
	mustSymlink(t, filepath.Join(dir, "real", "t.yaml"), filepath.Join(dir, "zlink.yaml"))
	h := newHarness(t, dir)
	writeFile(t, filepath.Join(dir, "real", "t.yaml"), svcYAML("x", "s", 90))
	h.waitFor("the link's copy to follow", func() bool { s := h.service("x", "s"); return s != nil && len(s.Spec.Ports) == 1 })
	h.barrier()
	h.matchesFreshLoad()

	writeFile(t, filepath.Join(dir, "m.yaml"), nsYAML("m"))
	h.waitFor("m", func() bool { return h.f.static.Namespaces.GetKey("m") != nil })
	_ = os.Remove(filepath.Join(dir, "m.yaml"))
	if err := syscall.Mkfifo(filepath.Join(dir, "m.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.waitFor("the FIFO's problem", func() bool { return h.problem("m.yaml") != nil })
	_ = os.Remove(filepath.Join(dir, "m.yaml"))
	writeFile(t, filepath.Join(dir, "m.yaml"), nsYAML("m2"))
	h.waitFor("m2 and no problem", func() bool {
		return h.f.static.Namespaces.GetKey("m2") != nil && h.f.static.Namespaces.GetKey("m") == nil && h.problem("m.yaml") == nil
	})
}

// A folder removed and made again at once (one burst of events) is still watched.
func TestFilesFolderRemadeAtOnce(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "sub", "a.yaml"), nsYAML("a"))
	h := newHarness(t, dir)
	for i := 0; i < 5; i++ {
		_ = os.RemoveAll(filepath.Join(dir, "sub"))
		writeFile(t, filepath.Join(dir, "sub", "a.yaml"), nsYAML(fmt.Sprint("v", i)))
		h.barrier()
		writeFile(t, filepath.Join(dir, "sub", "a.yaml"), nsYAML(fmt.Sprint("w", i)))
		h.waitFor("the edit in the remade folder", func() bool { return h.f.static.Namespaces.GetKey(fmt.Sprint("w", i)) != nil })
	}
}

// TestFilesDeeplyNestedFileIsAProblem: a file nested millions deep (which overflowed the stack
// of the fast reader, fatally, at startup and again at every restart) is reported as an invalid
// manifest, at startup and live, and the rest of the folder is served.
func TestFilesDeeplyNestedFileIsAProblem(t *testing.T) {
	dir := t.TempDir()
	deep := deepDocs()
	writeFile(t, filepath.Join(dir, "ok.yaml"), nsYAML("ok"))
	writeFile(t, filepath.Join(dir, "deep.yaml"), string(deep["flow sequences"]))
	h := newHarness(t, dir)
	isDepthProblem := func(rel string) bool {
		p := h.problem(rel)
		return p != nil && p.Problems[0].Reason == ReasonInvalidManifest && strings.Contains(p.Problems[0].Detail, "exceeded max depth")
	}
	if !isDepthProblem("deep.yaml") {
		t.Fatalf("deep.yaml: %+v", h.problem("deep.yaml"))
	}
	if h.f.static.Namespaces.GetKey("ok") == nil {
		t.Fatal("the rest of the folder is not served")
	}
	for i, name := range []string{"flow mappings with keys", "block sequences on a line", "JSON objects"} {
		rel := fmt.Sprintf("deep%d.json", i)
		writeRename(t, filepath.Join(dir, rel), string(deep[name]))
		h.waitFor(rel+"'s problem", func() bool { return isDepthProblem(rel) })
	}
	writeFile(t, filepath.Join(dir, "more.yaml"), nsYAML("more"))
	h.waitFor("a file written after them", func() bool { return h.f.static.Namespaces.GetKey("more") != nil })
}

// recorder records the events of collections, in the order each delivers them, and wakes its
// waits after each batch recorded.
type recorder struct {
	mu      sync.Mutex
	events  []string // "<event> <Kind>/<key>"
	changed *fixtures.Waker
}

func newRecorder() *recorder { return &recorder{changed: fixtures.NewWaker()} }

func record[T any](r *recorder, kind string, c krt.Collection[T]) {
	c.RegisterBatch(func(evs []krt.Event[T]) {
		r.mu.Lock()
		for _, e := range evs {
			r.events = append(r.events, e.Event.String()+" "+kind+"/"+krt.GetKey(any(e.Latest())))
		}
		r.mu.Unlock()
		r.changed.Wake()
	}, false)
}

// since returns the events recorded from index i on.
func (r *recorder) since(i int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events[min(i, len(r.events)):])
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// await waits, on the recorded events, until every one of want has been recorded after index i.
func (r *recorder) await(t *testing.T, i int, want ...string) {
	t.Helper()
	r.changed.Await(t, 10*time.Second, fmt.Sprintf("the events %v", want), func() (bool, string) {
		got := r.since(i)
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return slices.Contains(got, w) })
		return len(missing) == 0, fmt.Sprintf("missing %v; recorded %v", missing, got)
	})
}

// TestFilesRenameIsOneChange: a file renamed, or removed and another written with the same
// objects within the coalescing window, moves its objects to the other file as one change: a
// client never sees them go (a service of the file lost its endpoints for a while).
func TestFilesRenameIsOneChange(t *testing.T) {
	dir := t.TempDir()
	pod := func(ip string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x}\nstatus: {phase: Running, podIP: " + ip + "}\n"
	}
	writeFile(t, filepath.Join(dir, "a.yaml"), svcYAML("x", "s", 80)+"---\n"+pod("10.0.0.1"))
	// A window long enough that a removal and the write after it are one batch.
	h := newHarnessWith(t, dir, FilesOptions{Coalesce: 300 * time.Millisecond})
	r := newRecorder()
	record(r, "Service", h.f.static.Services)
	record(r, "Pod", h.f.static.Pods)
	marker := 0
	// barrier writes a file of a Service and a Pod, waits for them, removes it and waits for them
	// to go: each collection delivers its events in order, and the removal is a change of its
	// own, after every earlier one, so every event before it has been recorded.
	barrier := func() []string {
		t.Helper()
		marker++
		i := r.len()
		name := fmt.Sprintf("marker%d", marker)
		p := filepath.Join(dir, "zzz-"+name+".yaml")
		writeFile(t, p, svcYAML("x", name, 80)+"---\n"+strings.ReplaceAll(pod("10.9.0.1"), "name: p,", "name: "+name+","))
		r.await(t, i, "add Service/x/"+name, "add Pod/x/"+name)
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		r.await(t, i, "delete Service/x/"+name, "delete Pod/x/"+name)
		return r.since(i)
	}
	noDeletes := func(what string, evs []string) {
		t.Helper()
		for _, e := range evs {
			if strings.HasPrefix(e, "delete ") && !strings.Contains(e, "marker") {
				t.Errorf("%s: %s (events %v)", what, e, evs)
			}
		}
	}
	files := func() []string {
		var out []string
		for _, st := range h.f.Status() {
			out = append(out, fmt.Sprintf("%s:%d", st.Path, st.Objects))
		}
		return out
	}

	// mv a.yaml b.yaml
	i := r.len()
	if err := os.Rename(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	evs := barrier()
	noDeletes("a rename", evs)
	if got := files(); !slices.Equal(got, []string{"b.yaml:2"}) {
		t.Errorf("after the rename, files %v", got)
	}
	if slices.ContainsFunc(r.since(i), func(e string) bool { return strings.HasSuffix(e, "/x/s") || strings.HasSuffix(e, "/x/p") }) {
		t.Errorf("a rename changed the objects: %v", r.since(i))
	}

	// rm b.yaml; write c.yaml defining the same objects, the Service changed.
	i = r.len()
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "c.yaml"), svcYAML("x", "s", 81)+"---\n"+pod("10.0.0.1"))
	evs = barrier()
	noDeletes("a removal and a write", evs)
	if !slices.Contains(r.since(i), "update Service/x/s") {
		t.Errorf("the changed Service was not updated: %v", r.since(i))
	}
	if got := files(); !slices.Equal(got, []string{"c.yaml:2"}) {
		t.Errorf("after the removal and the write, files %v", got)
	}

	// A move into a sub-folder, and a file renamed over another that defines the same objects.
	writeFile(t, filepath.Join(dir, "sub", "keep.yaml"), nsYAML("x"))
	writeFile(t, filepath.Join(dir, "d.yaml"), svcYAML("x", "s", 81)+"---\n"+pod("10.0.0.1"))
	barrier()
	i = r.len()
	if err := os.Rename(filepath.Join(dir, "c.yaml"), filepath.Join(dir, "sub", "c.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "d.yaml"), filepath.Join(dir, "sub", "keep.yaml")); err != nil {
		t.Fatal(err)
	}
	evs = barrier()
	noDeletes("moves into a sub-folder", evs)
	if got := files(); !slices.Equal(got, []string{"sub/c.yaml:2", "sub/keep.yaml:2"}) {
		t.Errorf("after the moves, files %v", got)
	}
	// Deletions are written after the updates: wait for the Namespace of the file renamed over.
	h.waitFor("the Namespace of the file renamed over to go", func() bool { return h.f.static.Namespaces.GetKey("x") == nil })
	if s := h.service("x", "s"); s == nil || s.Spec.Ports[0].Port != 81 {
		t.Errorf("service %v", s)
	}
	h.matchesFreshLoad()
}

// repoint points link at target atomically, as ln -sfn does: a new link renamed over it.
func repoint(t *testing.T, target, link string) {
	t.Helper()
	tmp := link + ".tmp"
	mustSymlink(t, target, tmp)
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
}

// replay applies recorded events to the keys held before them, failing if the set is ever
// empty, and returns the keys held after.
func replay(t *testing.T, before []string, events []string) []string {
	t.Helper()
	held := map[string]bool{}
	for _, k := range before {
		held[k] = true
	}
	for i, e := range events {
		ev, key, _ := strings.Cut(e, " ")
		if ev == "delete" {
			delete(held, key)
		} else {
			held[key] = true
		}
		if len(held) == 0 {
			t.Errorf("no object held after event %d of %v", i, events)
		}
	}
	return collections.SortedKeys(held)
}

// TestFilesRootSymlinkToAFolder: --manifests given as a symlink to a folder (current -> v1)
// serves and follows the folder; re-pointed (ln -sfn v2 current), the new folder replaces the
// old as one change, never without objects; a link that leads nowhere keeps what it led to.
func TestFilesRootSymlinkToAFolder(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "v1", "ns.yaml"), nsYAML("a"))
	writeFile(t, filepath.Join(dir, "v1", "svc.yaml"), svcYAML("x", "s", 80))
	writeFile(t, filepath.Join(dir, "v1", "sub", "old.yaml"), svcYAML("x", "old", 80))
	writeFile(t, filepath.Join(dir, "v1", "broken.yaml"), "kind: [\n")
	writeFile(t, filepath.Join(dir, "v2", "svc.yaml"), svcYAML("x", "s", 81))
	writeFile(t, filepath.Join(dir, "v2", "new.yaml"), svcYAML("x", "new", 80))
	writeFile(t, filepath.Join(dir, "v2", "sub", "bad2.yaml"), "kind: [\n")
	link := filepath.Join(dir, "current")
	mustSymlink(t, "v1", link)
	h := newHarness(t, link)
	port := func() int32 {
		if s := h.service("x", "s"); s != nil {
			return s.Spec.Ports[0].Port
		}
		return 0
	}
	if port() != 80 || h.service("x", "old") == nil || h.f.static.Namespaces.GetKey("a") == nil {
		t.Fatalf("the link's folder is not served: %v; status %+v", contents(h.f), h.f.Status())
	}
	if h.problem("broken.yaml") == nil || h.problem("current") != nil {
		t.Fatalf("problems %v", h.f.problems.List())
	}
	writeFile(t, filepath.Join(dir, "v1", "sub", "edit.yaml"), nsYAML("edit"))
	h.waitFor("an edit in the folder", func() bool { return h.f.static.Namespaces.GetKey("edit") != nil })

	r := newRecorder()
	record(r, "Service", h.f.static.Services)
	before := []string{"Service/x/old", "Service/x/s"}
	repoint(t, "v2", link)
	h.waitFor("v2", func() bool {
		return port() == 81 && h.service("x", "new") != nil && h.service("x", "old") == nil && h.f.static.Namespaces.GetKey("a") == nil &&
			h.problem("broken.yaml") == nil && h.problem("sub/bad2.yaml") != nil
	})
	r.await(t, 0, "update Service/x/s", "add Service/x/new", "delete Service/x/old")
	if got := replay(t, before, r.since(0)); !slices.Equal(got, []string{"Service/x/new", "Service/x/s"}) {
		t.Errorf("after the switch: %v", got)
	}
	if slices.Contains(r.since(0), "delete Service/x/s") {
		t.Errorf("an object of both folders was removed: %v", r.since(0))
	}
	h.matchesFreshLoad()

	// The new folder is followed, the old one no longer.
	writeFile(t, filepath.Join(dir, "v1", "ghost.yaml"), nsYAML("ghost"))
	writeFile(t, filepath.Join(dir, "v2", "sub", "later.yaml"), nsYAML("later"))
	h.waitFor("an edit in the new folder", func() bool { return h.f.static.Namespaces.GetKey("later") != nil })
	h.barrier()
	if h.f.static.Namespaces.GetKey("ghost") != nil {
		t.Error("the old folder is still followed")
	}

	// A link that leads nowhere: what it led to is kept, and the link reported.
	repoint(t, "missing", link)
	h.waitFor("the link's problem", func() bool { p := h.problem("current"); return p != nil && p.Problems[0].Reason == ReasonSymlinkBroken })
	if port() != 81 || h.f.static.Namespaces.GetKey("later") == nil {
		t.Fatalf("a dangling link dropped the objects: %v", contents(h.f))
	}
	// Back to v1, by removing the link and making it again (not atomic): s is never removed.
	i := r.len()
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, "v1", link)
	h.waitFor("v1 again", func() bool {
		return port() == 80 && h.service("x", "old") != nil && h.service("x", "new") == nil && h.problem("current") == nil &&
			h.problem("broken.yaml") != nil && h.problem("sub/bad2.yaml") == nil
	})
	r.await(t, i, "update Service/x/s", "add Service/x/old", "delete Service/x/new")
	if slices.Contains(r.since(i), "delete Service/x/s") {
		t.Errorf("an object of both folders was removed: %v", r.since(i))
	}
	h.barrier()
	h.matchesFreshLoad()
}

// TestFilesRootSymlinkToAFile: --manifests given as a symlink to a file serves the file, named
// after the link, follows its edits, and follows the link to a file in another folder.
func TestFilesRootSymlinkToAFile(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "v1.yaml"), svcYAML("x", "s", 80)+"---\n"+nsYAML("a"))
	writeFile(t, filepath.Join(dir, "other", "v2.yaml"), svcYAML("x", "s", 81))
	link := filepath.Join(dir, "current.yaml")
	mustSymlink(t, "v1.yaml", link)
	h := newHarness(t, link)
	port := func() int32 {
		if s := h.service("x", "s"); s != nil {
			return s.Spec.Ports[0].Port
		}
		return 0
	}
	if port() != 80 {
		t.Fatalf("the link's file is not served: %v", contents(h.f))
	}
	writeFile(t, filepath.Join(dir, "v1.yaml"), "kind: [\n")
	h.waitFor("the broken edit's problem, named after the link", func() bool { return h.problem("current.yaml") != nil })
	writeFile(t, filepath.Join(dir, "v1.yaml"), svcYAML("x", "s", 82)+"---\n"+nsYAML("a"))
	h.waitFor("the fix", func() bool { return port() == 82 && h.problem("current.yaml") == nil })

	r := newRecorder()
	record(r, "Service", h.f.static.Services)
	repoint(t, filepath.Join("other", "v2.yaml"), link)
	h.waitFor("v2", func() bool { return port() == 81 && h.f.static.Namespaces.GetKey("a") == nil })
	r.await(t, 0, "update Service/x/s")
	if slices.Contains(r.since(0), "delete Service/x/s") {
		t.Errorf("the Service of both files was removed: %v", r.since(0))
	}
	writeFile(t, filepath.Join(dir, "other", "v2.yaml"), svcYAML("x", "s", 83))
	h.waitFor("an edit of the new target, in another folder", func() bool { return port() == 83 })
	h.matchesFreshLoad()
}

// TestFilesEditorSaveKeepsItsObjects: an editor saving a file by renaming the original away and
// writing a new one (vim's backupcopy=no, emacs's first save), or removing it and writing it
// again, 20 to 100 ms apart: the objects never go, and one that changed is updated; a file that
// really goes away takes its objects with it once the grace ends.
func TestFilesEditorSaveKeepsItsObjects(t *testing.T) {
	dir := t.TempDir()
	pod := func(ip string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x}\nstatus: {phase: Running, podIP: " + ip + "}\n"
	}
	p := filepath.Join(dir, "shop.yaml")
	writeFile(t, p, svcYAML("x", "s", 80)+"---\n"+pod("10.0.0.1"))
	h := newHarness(t, dir)
	r := newRecorder()
	record(r, "Service", h.f.static.Services)
	record(r, "Pod", h.f.static.Pods)
	for _, save := range []struct {
		name  string
		gap   time.Duration
		away  func() error
		final string
	}{
		{"renamed away, written 20 ms later", 20 * time.Millisecond, func() error { return os.Rename(p, p+"~") }, pod("10.0.0.1")},
		{"renamed away, written 100 ms later", 100 * time.Millisecond, func() error { return os.Rename(p, p+"~") }, pod("10.0.0.2")},
		{"removed, written 50 ms later", 50 * time.Millisecond, func() error { return os.Remove(p) }, pod("10.0.0.3")},
	} {
		i := r.len()
		if err := save.away(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(save.gap) // the editor's pace
		writeFile(t, p, svcYAML("x", "s", 80)+"---\n"+save.final)
		h.barrier()
		for _, e := range r.since(i) {
			if strings.HasPrefix(e, "delete ") {
				t.Errorf("%s: %s (events %v)", save.name, e, r.since(i))
			}
		}
		if got := h.f.static.Pods.GetKey("x/p"); got == nil || len((*got).IPs) != 1 || !strings.Contains(save.final, (*got).IPs[0]) {
			t.Errorf("%s: the Pod is %+v", save.name, got)
		}
	}
	i := r.len()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	r.await(t, i, "delete Service/x/s", "delete Pod/x/p")
}
