package sources

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.uber.org/zap"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/controllers"
	"istio.io/istio/pkg/kube/kclient"
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/krteds/krteds/collections"
)

// LabelMultiCluster marks the Secrets that hold remote clusters' kubeconfigs (istiod's).
const LabelMultiCluster = "istio/multiCluster"

// RemoteClusters runs the mesh's remote clusters, each with its own inputs, and holds the
// collection of those whose inputs have synced: a cluster that is unreachable or slow to sync
// never holds the graph back; it joins when it has synced and leaves, its collections stopped,
// when it is removed or replaced.
type RemoteClusters struct {
	col      krt.StaticCollection[*collections.Cluster]
	debugger *krt.DebugHandler
	localID  string
	log      *zap.Logger
	stop     <-chan struct{}

	// OnFileProblems (optional) is given the file problems of each cluster read from a folder.
	OnFileProblems func(krt.Collection[collections.ObjectProblems])

	mu sync.Mutex
	// running is how to stop each cluster started, by ID, and what started it.
	running map[string]runningCluster
}

type runningCluster struct {
	stop   chan struct{}
	origin string
	hash   uint64
	// serving: the cluster is in the collection. A cluster started again (a new kubeconfig)
	// replaces the serving one only once it has synced: replaces is the serving one's stop,
	// closed then, so the cluster's endpoints never leave the mesh while it restarts.
	serving  bool
	replaces chan struct{}
}

// NewRemoteClusters makes an empty set of remote clusters; all stop when stop closes. localID is
// the local cluster's ID, which no remote cluster may have.
func NewRemoteClusters(opts krt.OptionsBuilder, localID string, log *zap.Logger) *RemoteClusters {
	if log == nil {
		log = zap.NewNop()
	}
	return &RemoteClusters{
		col:      krt.NewStaticCollection[*collections.Cluster](nil, nil, opts.WithName(collections.NameRemoteClusters)...),
		debugger: opts.Debugger(), localID: localID, log: log, stop: opts.Stop(),
		running: map[string]runningCluster{},
	}
}

// Collection is the remote clusters that have synced.
func (r *RemoteClusters) Collection() krt.Collection[*collections.Cluster] { return r.col }

// AddClient runs a remote cluster read through a client (replacing one of the same ID). It
// joins once its informers have synced.
func (r *RemoteClusters) AddClient(id string, c kube.Client, source string) error {
	return r.add(id, source, "", 0, func(stop chan struct{}, opts krt.OptionsBuilder) (collections.Inputs, func(), error) {
		return Informers(c, opts), func() { c.RunAndWait(stop) }, nil
	})
}

// AddManifests runs a remote cluster read from a folder of manifests (replacing one of the same
// ID). It joins once every file has been read.
func (r *RemoteClusters) AddManifests(id, path string) error {
	return r.add(id, "manifests "+path, "", 0, func(stop chan struct{}, opts krt.OptionsBuilder) (collections.Inputs, func(), error) {
		f, err := NewFiles(path, opts, FilesOptions{Log: r.log.Named(id)})
		if err != nil {
			return collections.Inputs{}, nil, err
		}
		if r.OnFileProblems != nil {
			r.OnFileProblems(f.Problems())
		}
		return f.Inputs(), func() { f.Run(stop) }, nil
	})
}

func (r *RemoteClusters) add(id, source, origin string, hash uint64,
	build func(stop chan struct{}, opts krt.OptionsBuilder) (collections.Inputs, func(), error),
) error {
	if id == "" || id == r.localID {
		return fmt.Errorf("remote cluster %q: the ID must be set and differ from the local cluster's (%q)", id, r.localID)
	}
	stop := make(chan struct{})
	in, run, err := build(stop, krt.NewOptionsBuilder(stop, id, r.debugger))
	if err != nil {
		close(stop)
		return fmt.Errorf("remote cluster %s: %w", id, err)
	}
	r.mu.Lock()
	next := runningCluster{stop: stop, origin: origin, hash: hash}
	if old, ok := r.running[id]; ok {
		if old.serving {
			next.replaces = old.stop
		} else {
			// A start that never synced is dropped; the one it was to replace still serves.
			close(old.stop)
			next.replaces = old.replaces
		}
	}
	r.running[id] = next
	r.mu.Unlock()
	go func() {
		select {
		case <-r.stop:
			r.Remove(id)
		case <-stop:
		}
	}()
	go run()
	go func() {
		start := time.Now()
		slow := time.AfterFunc(30*time.Second, func() {
			r.log.Warn("remote cluster not synced yet; it joins when it has", zap.String("cluster", id), zap.String("source", source))
		})
		defer slow.Stop()
		for _, s := range []krt.Syncer{in.Namespaces, in.Nodes, in.Services, in.Pods, in.EndpointSlices} {
			if !s.WaitUntilSynced(stop) {
				return
			}
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		cur, ok := r.running[id]
		if !ok || cur.stop != stop {
			return // replaced or removed meanwhile
		}
		r.col.UpdateObject(&collections.Cluster{ID: id, Source: source, Inputs: in, Stop: stop})
		if cur.replaces != nil {
			close(cur.replaces)
		}
		cur.serving, cur.replaces = true, nil
		r.running[id] = cur
		r.log.Info("remote cluster joined", zap.String("cluster", id), zap.String("source", source), zap.Duration("synced in", time.Since(start)))
	}()
	return nil
}

// Remove stops a remote cluster; its endpoints leave the mesh.
func (r *RemoteClusters) Remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.running[id]; ok {
		r.col.DeleteObject(id)
		close(c.stop)
		if c.replaces != nil {
			close(c.replaces)
		}
		delete(r.running, id)
		r.log.Info("remote cluster left", zap.String("cluster", id))
	}
}

// WatchSecrets follows, in the local cluster, the Secrets of namespace labelled
// istio/multiCluster=true, as istiod does: each data key is a remote cluster's ID, its value a
// kubeconfig. A key that appears starts its cluster, a changed kubeconfig restarts it, a key or
// Secret that goes removes it. newClient makes a client of a kubeconfig (kube.NewClient over it
// when nil).
func (r *RemoteClusters) WatchSecrets(local kube.Client, namespace string, newClient func(id string, kubeconfig []byte) (kube.Client, error)) {
	if newClient == nil {
		newClient = ClientOfKubeconfig
	}
	secrets := kclient.NewFiltered[*corev1.Secret](local, kclient.Filter{Namespace: namespace, LabelSelector: LabelMultiCluster + "=true"})
	// The informer calls the handlers one at a time.
	apply := func(s *corev1.Secret, deleted bool) {
		origin := s.Namespace + "/" + s.Name
		var want map[string][]byte
		if !deleted {
			want = s.Data
		}
		// The clusters this Secret started that it no longer names leave.
		r.mu.Lock()
		var gone []string
		for id, c := range r.running {
			if _, ok := want[id]; c.origin == origin && !ok {
				gone = append(gone, id)
			}
		}
		r.mu.Unlock()
		for _, id := range gone {
			r.Remove(id)
		}
		for _, id := range slices.Sorted(maps.Keys(want)) {
			kc := want[id]
			h := xxhash.Sum64(kc)
			r.mu.Lock()
			cur, ok := r.running[id]
			r.mu.Unlock()
			if ok && cur.origin == origin && cur.hash == h {
				continue
			}
			c, err := newClient(id, kc)
			if err == nil {
				err = r.add(id, "secret "+origin, origin, h, func(stop chan struct{}, opts krt.OptionsBuilder) (collections.Inputs, func(), error) {
					return Informers(c, opts), func() { c.RunAndWait(stop) }, nil
				})
			}
			if err != nil {
				r.log.Error("remote cluster not started", zap.String("cluster", id), zap.String("secret", origin), zap.Error(err))
			}
		}
	}
	secrets.AddEventHandler(controllers.EventHandler[*corev1.Secret]{
		AddFunc:    func(s *corev1.Secret) { apply(s, false) },
		UpdateFunc: func(_, s *corev1.Secret) { apply(s, false) },
		DeleteFunc: func(s *corev1.Secret) { apply(s, true) },
	})
}

// ClientOfKubeconfig makes a client of a remote cluster from its kubeconfig.
func ClientOfKubeconfig(id string, kubeconfig []byte) (kube.Client, error) {
	cc, err := clientcmd.NewClientConfigFromBytes(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig of %s: %w", id, err)
	}
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig of %s: %w", id, err)
	}
	return kube.NewClient(kube.NewClientConfigForRestConfig(rc), cluster.ID(id))
}
