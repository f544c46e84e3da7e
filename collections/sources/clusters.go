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
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/krteds/krteds/collections"
)

// LabelMultiCluster marks the Secrets that hold remote clusters' kubeconfigs (istiod's).
const LabelMultiCluster = "istio/multiCluster"

// KindClusterSecret is the problem kind of the Secrets that hold remote clusters' kubeconfigs.
const KindClusterSecret = "ClusterSecret"

// Reasons a cluster Secret's key does not start its cluster.
const (
	// ReasonInvalidKubeconfig: the kubeconfig cannot be read, or asks for what a Secret may not
	// (an exec plugin, an auth provider, a file).
	ReasonInvalidKubeconfig = "invalid_kubeconfig"
	// ReasonClusterNotStarted: the kubeconfig is good but the cluster cannot be started (its ID
	// is the local cluster's).
	ReasonClusterNotStarted = "cluster_not_started"
)

// NameSecretProblems names the collection of cluster Secret problems.
const NameSecretProblems = "clusters/SecretProblems"

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

	// OnFileProblems (optional) is given each collection of problems the remote clusters have:
	// the file problems of each cluster read from a folder, and the problems of the cluster
	// Secrets WatchSecrets follows.
	OnFileProblems func(krt.Collection[collections.ObjectProblems])

	// secretProblems holds, per cluster Secret, why some of its clusters were not started.
	secretProblems krt.StaticCollection[collections.ObjectProblems]

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
		col:            krt.NewStaticCollection[*collections.Cluster](nil, nil, opts.WithName(collections.NameRemoteClusters)...),
		secretProblems: krt.NewStaticCollection[collections.ObjectProblems](nil, nil, opts.WithName(NameSecretProblems)...),
		debugger:       opts.Debugger(), localID: localID, log: log, stop: opts.Stop(),
		running: map[string]runningCluster{},
	}
}

// Collection is the remote clusters that have synced.
func (r *RemoteClusters) Collection() krt.Collection[*collections.Cluster] { return r.col }

// SecretProblems holds, per cluster Secret, the keys whose cluster was not started and why; an
// entry goes when the Secret is fixed or removed.
func (r *RemoteClusters) SecretProblems() krt.Collection[collections.ObjectProblems] {
	return r.secretProblems
}

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
// Secret that goes removes it. newClient makes a client of a kubeconfig
// (ClientOfUntrustedKubeconfig when nil: whoever may write such a Secret must not be able to make
// krteds run a command or send a file it can read). A key whose cluster cannot be started is
// logged, with the Secret and the key, and listed in SecretProblems (given to OnFileProblems,
// which counts it in krteds_skipped_objects_total{kind="ClusterSecret"}).
func (r *RemoteClusters) WatchSecrets(local kube.Client, namespace string, newClient func(id string, kubeconfig []byte) (kube.Client, error)) {
	if newClient == nil {
		newClient = ClientOfUntrustedKubeconfig
	}
	if r.OnFileProblems != nil {
		r.OnFileProblems(r.secretProblems)
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
		var problems []collections.Problem
		for _, id := range slices.Sorted(maps.Keys(want)) {
			kc := want[id]
			h := xxhash.Sum64(kc)
			r.mu.Lock()
			cur, ok := r.running[id]
			r.mu.Unlock()
			if ok && cur.origin == origin && cur.hash == h {
				continue
			}
			reason := ReasonInvalidKubeconfig
			c, err := newClient(id, kc)
			if err == nil {
				reason = ReasonClusterNotStarted
				err = r.add(id, "secret "+origin, origin, h, func(stop chan struct{}, opts krt.OptionsBuilder) (collections.Inputs, func(), error) {
					return Informers(c, opts), func() { c.RunAndWait(stop) }, nil
				})
			}
			if err != nil {
				r.log.Error("remote cluster not started", zap.String("cluster", id), zap.String("secret", origin), zap.String("key", id), zap.Error(err))
				problems = append(problems, collections.Problem{Kind: KindClusterSecret, Object: origin, Reason: reason,
					Detail: fmt.Sprintf("key %q: %v", id, err)})
			}
		}
		if len(problems) == 0 {
			r.secretProblems.DeleteObject(KindClusterSecret + "/" + origin)
		} else {
			r.secretProblems.ConditionalUpdateObject(collections.ObjectProblems{Kind: KindClusterSecret, Object: origin, Problems: problems})
		}
	}
	secrets.AddEventHandler(controllers.EventHandler[*corev1.Secret]{
		AddFunc:    func(s *corev1.Secret) { apply(s, false) },
		UpdateFunc: func(_, s *corev1.Secret) { apply(s, false) },
		DeleteFunc: func(s *corev1.Secret) { apply(s, true) },
	})
}

// ClientOfTrustedKubeconfig makes a client of a remote cluster from a kubeconfig as it is: exec
// plugins, auth providers and file references included. Only for a kubeconfig the operator
// gave krteds; a cluster Secret's goes through ClientOfUntrustedKubeconfig.
func ClientOfTrustedKubeconfig(id string, kubeconfig []byte) (kube.Client, error) {
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

// ClientOfUntrustedKubeconfig makes a client of a remote cluster from a kubeconfig anyone able
// to write a cluster Secret may have written. It refuses what would make krteds run a command
// (exec plugins), use an auth provider, or read a file of its own and send it, or trust it, on
// that kubeconfig's behalf (a token file, a client certificate or key file, a certificate
// authority file): a remote cluster's credentials and CA must be inline. What remains is
// sanitised as istiod does (kube.NewUntrustedRestConfig: validated, users rebuilt from the fields
// reviewed).
func ClientOfUntrustedKubeconfig(id string, kubeconfig []byte) (kube.Client, error) {
	if len(kubeconfig) == 0 {
		return nil, fmt.Errorf("kubeconfig of %s is empty", id)
	}
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig of %s: %w", id, err)
	}
	if err := untrustedKubeconfigAllowed(raw); err != nil {
		return nil, fmt.Errorf("kubeconfig of %s is not allowed: %w", id, err)
	}
	rc, err := kube.NewUntrustedRestConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig of %s: %w", id, err)
	}
	return kube.NewClient(kube.NewClientConfigForRestConfig(rc), cluster.ID(id))
}

// untrustedKubeconfigAllowed refuses, in every user and cluster of a kubeconfig (not only those
// of its current context), exec plugins, auth providers and file references. It is stricter than
// istiod, which takes an oidc auth provider and a certificate-authority file, and which an
// environment variable may loosen.
func untrustedKubeconfigAllowed(c *clientcmdapi.Config) error {
	for _, name := range slices.Sorted(maps.Keys(c.AuthInfos)) {
		u := c.AuthInfos[name]
		if u == nil {
			continue
		}
		switch {
		case u.Exec != nil:
			return fmt.Errorf("user %q: an exec plugin (%q) is not allowed", name, u.Exec.Command)
		case u.AuthProvider != nil:
			return fmt.Errorf("user %q: an auth provider (%q) is not allowed", name, u.AuthProvider.Name)
		case u.TokenFile != "":
			return fmt.Errorf("user %q: a token file (tokenFile) is not allowed; give the token inline", name)
		case u.ClientCertificate != "":
			return fmt.Errorf("user %q: a client certificate file (client-certificate) is not allowed; give client-certificate-data", name)
		case u.ClientKey != "":
			return fmt.Errorf("user %q: a client key file (client-key) is not allowed; give client-key-data", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Clusters)) {
		if cl := c.Clusters[name]; cl != nil && cl.CertificateAuthority != "" {
			return fmt.Errorf("cluster %q: a certificate authority file (certificate-authority) is not allowed; give certificate-authority-data", name)
		}
	}
	return nil
}
