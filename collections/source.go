package collections

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"istio.io/istio/pkg/kube"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/testing"
)

// ManifestSource serves a folder (or file) of manifests through a fake kube client, and keeps
// the client in step with the files: Reload applies the difference as creates, updates and
// deletes, which informers see exactly as they would on a cluster.
type ManifestSource struct {
	path   string
	client kube.CLIClient

	mu sync.Mutex
	// files maps a file to the digest of its content and the objects it defined.
	files map[string]fileState
	// seen is the stamp of each file at the previous reload.
	seen map[string]fileStamp
	// applied maps each object key to the object last written to the client.
	applied map[string]runtime.Object
}

type fileState struct {
	stamp  fileStamp
	digest [32]byte
	keys   []string
	objs   map[string]runtime.Object
}

// fileStamp is what os.Stat says of a file; a file is read again only when it changes, and only
// once it has stayed the same for one reload (so a file being written is not read half-way).
type fileStamp struct {
	size    int64
	modTime time.Time
}

// ReloadStats counts what a reload changed.
type ReloadStats struct {
	Created, Updated, Deleted int
}

// Changed reports whether anything changed.
func (s ReloadStats) Changed() bool { return s.Created+s.Updated+s.Deleted > 0 }

// NewManifestSource loads path into a new fake client. Documents that fail to decode are
// returned as errors and skipped; an unreadable path is an error.
func NewManifestSource(path string) (*ManifestSource, []error, error) {
	m := &ManifestSource{
		path:    path,
		client:  kube.NewFakeClient(),
		files:   map[string]fileState{},
		seen:    map[string]fileStamp{},
		applied: map[string]runtime.Object{},
	}
	InstallIstioCRDs(m.client)
	_, errs, err := m.reload(false)
	if err != nil {
		return nil, nil, err
	}
	return m, errs, nil
}

// Client is the fake client the manifests are served through.
func (m *ManifestSource) Client() kube.CLIClient { return m.client }

// Reload re-reads the files and applies what changed. A file with a document that fails to
// decode keeps the objects it defined before, so a half-saved edit never deletes anything.
func (m *ManifestSource) Reload() (ReloadStats, []error, error) { return m.reload(true) }

func (m *ManifestSource) reload(settle bool) (ReloadStats, []error, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	paths, err := manifestFiles(m.path)
	if err != nil {
		return ReloadStats{}, nil, err
	}
	var errs []error
	next := map[string]fileState{}
	seen := map[string]fileStamp{}
	for _, f := range paths {
		fi, err := os.Stat(f)
		if err != nil {
			continue // removed since the listing
		}
		stamp := fileStamp{size: fi.Size(), modTime: fi.ModTime()}
		seen[f] = stamp
		old, known := m.files[f]
		if known && old.stamp == stamp {
			next[f] = old
			continue
		}
		if settle && m.seen[f] != stamp {
			// Changed since the last look: wait until it stops changing.
			if known {
				next[f] = old
			}
			continue
		}
		data, err := readBounded(f)
		if err != nil {
			errs = append(errs, err)
			if old, ok := m.files[f]; ok {
				next[f] = old
			}
			continue
		}
		digest := sha256.Sum256(data)
		if known && old.digest == digest {
			old.stamp = stamp
			next[f] = old
			continue
		}
		objs, derrs := DecodeManifests(data, f)
		if len(derrs) > 0 {
			errs = append(errs, derrs...)
			if old, ok := m.files[f]; ok {
				next[f] = old
				continue
			}
		}
		st := fileState{stamp: stamp, digest: digest, objs: map[string]runtime.Object{}}
		for _, o := range objs {
			k := ManifestKey(o.Object)
			if _, dup := st.objs[k]; !dup {
				st.keys = append(st.keys, k)
			}
			st.objs[k] = o.Object
		}
		next[f] = st
	}
	// The desired state: every object of every file; a later file wins on duplicates.
	want := map[string]runtime.Object{}
	var order []string
	for _, f := range sortedFileNames(next) {
		for _, k := range next[f].keys {
			if _, ok := want[k]; !ok {
				order = append(order, k)
			}
			want[k] = next[f].objs[k]
		}
	}
	var stats ReloadStats
	for _, k := range order {
		o := want[k]
		old, ok := m.applied[k]
		switch {
		case !ok:
			if err := m.write("create", o); err != nil {
				errs = append(errs, err)
				continue
			}
			stats.Created++
		case !equality.Semantic.DeepEqual(old, o):
			if err := m.write("update", o); err != nil {
				errs = append(errs, err)
				continue
			}
			stats.Updated++
		}
		m.applied[k] = o
	}
	for k, o := range m.applied {
		if _, ok := want[k]; ok {
			continue
		}
		if err := m.write("delete", o); err != nil {
			errs = append(errs, err)
			continue
		}
		delete(m.applied, k)
		stats.Deleted++
	}
	m.files = next
	m.seen = seen
	return stats, errs, nil
}

func sortedFileNames(m map[string]fileState) []string { return SortedKeys(m) }

// write applies one change to the tracker of the fake clientset that owns the object's group.
func (m *ManifestSource) write(verb string, o runtime.Object) error {
	gvks, _, err := kube.IstioScheme.ObjectKinds(o)
	if err != nil || len(gvks) == 0 {
		return fmt.Errorf("%s %s: unknown kind: %v", verb, ManifestKey(o), err)
	}
	gvr, _ := meta.UnsafeGuessKindToResource(gvks[0])
	var tracker testing.ObjectTracker
	if strings.Contains(gvr.Group, "istio.io") {
		f, ok := m.client.Istio().(interface{ Tracker() testing.ObjectTracker })
		if !ok {
			return fmt.Errorf("%s %s: no fake Istio client", verb, ManifestKey(o))
		}
		tracker = f.Tracker()
	} else {
		f, ok := m.client.Kube().(interface{ Tracker() testing.ObjectTracker })
		if !ok {
			return fmt.Errorf("%s %s: no fake Kubernetes client", verb, ManifestKey(o))
		}
		tracker = f.Tracker()
	}
	acc := o.(metav1.Object)
	ns := acc.GetNamespace()
	switch verb {
	case "create":
		err = tracker.Create(gvr, o.DeepCopyObject(), ns)
	case "update":
		err = tracker.Update(gvr, o.DeepCopyObject(), ns)
	case "delete":
		err = tracker.Delete(gvr, ns, acc.GetName())
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, ManifestKey(o), err)
	}
	return nil
}

// Watch reloads every interval until stop is closed, calling onReload after each reload that
// changed something or reported errors.
func (m *ManifestSource) Watch(stop <-chan struct{}, interval time.Duration, onReload func(ReloadStats, []error, error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			stats, errs, err := m.Reload()
			if (stats.Changed() || len(errs) > 0 || err != nil) && onReload != nil {
				onReload(stats, errs, err)
			}
		}
	}
}
