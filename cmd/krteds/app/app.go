// Package app is krteds' composition root: it picks the source of input objects (a cluster, a
// folder of manifests, or objects handed in by a test), builds the graph over them, and serves
// its outputs over xDS and HTTP.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/collections/sources"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs"
	"github.com/krteds/krteds/outputs/history"
	"github.com/krteds/krteds/outputs/source"
	"github.com/krteds/krteds/outputs/xds"
	"github.com/krteds/krteds/outputs/xds/admission"
	"github.com/krteds/krteds/outputs/xds/lrs"
)

// Options configures a running krteds. Exactly one source is set: Cluster, Manifests or Objects.
type Options struct {
	Config collections.Config
	// Cluster is a client of the cluster to watch.
	Cluster kube.Client
	// Manifests is a folder (or file) of manifests to serve, kept in step with the files.
	Manifests string
	// Objects seed static input collections (tests and benchmarks), changed through App.Static.
	Objects []any
	// ObjectsGiven says Objects is the source even when it is empty.
	ObjectsGiven bool

	// XDSListener serves ADS; DebugListener (optional) serves /ready, /metrics and /debug.
	XDSListener      net.Listener
	DebugListener    net.Listener
	DebugAllowRemote bool
	Log              *zap.Logger
	// Registry receives the metrics; a new one is made when nil.
	Registry *prometheus.Registry
	// GRPCOptions are added to the xDS gRPC server's options.
	GRPCOptions []grpc.ServerOption
	// SecureListener (optional) serves ADS over TLS with SecureTLS, which must require client
	// certificates: each stream's SPIFFE identity must match the namespace its node claims.
	SecureListener net.Listener
	SecureTLS      *tls.Config
	// TokenAudiences, when set, let clients of the secure listener authenticate with a Kubernetes
	// service-account token for one of these audiences (checked with TokenReview; Cluster only).
	TokenAudiences []string
	// LRSInterval is how often clients report their load when Config.LRS is on (default 10 s).
	LRSInterval time.Duration
	// Remote are the mesh's other clusters, each read through a client or from a folder.
	Remote []Remote
	// ClusterSecrets follows remote clusters in the local cluster's Secrets (Cluster only): those
	// of the system namespace labelled istio/multiCluster=true, a kubeconfig per cluster ID.
	ClusterSecrets bool
	// Limits bound the xDS server (zero fields take the defaults).
	Limits xds.Limits
	// HistoryPerService is how many changes of each service's endpoints are recorded (0: the
	// default; negative: none).
	HistoryPerService int
}

// Remote is one remote cluster: its ID and a client of it, or a folder of its manifests.
type Remote struct {
	ID        string
	Client    kube.Client
	Manifests string
}

// App is krteds assembled: the source, the graph, the xDS server and the debug server, running.
type App struct {
	Graph *graphs.Graph
	// Served is the graph as the xDS server, its debug pages and explain read it.
	Served   *source.Source
	XDS      *xds.Server
	Debugger *krt.DebugHandler
	Registry *prometheus.Registry
	// LoadReports is the LRS server (nil unless Config.LRS).
	LoadReports *lrs.LoadReports
	// Static holds the input collections when the source is Objects.
	Static *sources.Static
	// Files is the manifests source when the source is Manifests.
	Files *sources.Files
	// Remote runs the remote clusters (nil in a single-cluster mesh).
	Remote *sources.RemoteClusters
	// History records the changes of each service's endpoints and how they reached the
	// proxies (nil: not recorded).
	History *history.Store
	// Source says where the objects come from, for logs.
	Source string

	cluster kube.Client
	stop    chan struct{}
	grpc    *grpc.Server
	secure  *grpc.Server
	http    *http.Server
	log     *zap.Logger
	close   context.CancelFunc

	stopOnce sync.Once
}

// Start builds the source and the graph and starts serving. Serving starts at once; xDS
// responses wait until the graph has synced (for manifests, every file has been read before).
func Start(o Options) (*App, error) {
	if o.XDSListener == nil {
		return nil, errors.New("app: an xDS listener is required")
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	outputs.RegisterBuildInfo(reg)
	ctx, cancel := context.WithCancel(context.Background())
	a := &App{Debugger: new(krt.DebugHandler), Registry: reg, cluster: o.Cluster, stop: make(chan struct{}), log: log, close: cancel}
	fail := func(err error) (*App, error) {
		cancel()
		close(a.stop)
		return nil, err
	}
	opts := krt.NewOptionsBuilder(a.stop, "", a.Debugger)
	problems := outputs.NewProblemLog(log.Named("registry"), reg)

	var in collections.Inputs
	var run func()
	switch {
	case o.Manifests != "":
		files, err := sources.NewFiles(o.Manifests, opts, sources.FilesOptions{Log: log.Named("manifests")})
		if err != nil {
			return fail(err)
		}
		a.Files, a.Source = files, "manifests "+o.Manifests
		in, run = files.Inputs(), func() { files.Run(a.stop) }
		problems.Watch(files.Problems())
	case o.Cluster != nil:
		in, run = sources.Informers(o.Cluster, opts), func() {
			o.Cluster.RunAndWait(a.stop)
			// Once the client has synced, its CRD watcher knows what is installed.
			for _, kind := range slices.Sorted(maps.Keys(sources.IstioResources)) {
				gvr := sources.IstioResources[kind]
				if !sources.CRDInstalled(o.Cluster, gvr, func() { log.Info("CRD installed; reading it", zap.String("kind", kind)) }) {
					log.Info("CRD not installed; the collection stays empty until it is", zap.String("kind", kind), zap.String("resource", gvr.String()))
				}
			}
		}
		a.Source = "cluster"
		if o.Cluster.Kube() != nil {
			if rc := o.Cluster.RESTConfig(); rc != nil {
				a.Source = "cluster " + rc.Host
			}
		}
	case len(o.Objects) > 0 || o.ObjectsGiven:
		st := sources.NewStatic(opts, nil, o.Objects...)
		a.Static, a.Source = &st, "objects"
		in, run = st.Inputs(), func() {}
	default:
		return fail(errors.New("app: no source of objects (cluster, manifests or objects)"))
	}

	if len(o.Remote) > 0 || (o.ClusterSecrets && o.Cluster != nil) {
		a.Remote = sources.NewRemoteClusters(opts, o.Config.WithDefaults().ClusterID, log.Named("clusters"))
		in.RemoteClusters = a.Remote.Collection()
		a.Remote.OnFileProblems = problems.Watch
		for _, r := range o.Remote {
			var err error
			if r.Client != nil {
				err = a.Remote.AddClient(r.ID, r.Client, "kubeconfig")
			} else {
				err = a.Remote.AddManifests(r.ID, r.Manifests)
			}
			if err != nil {
				return fail(err)
			}
		}
		if o.ClusterSecrets && o.Cluster != nil {
			a.Remote.WatchSecrets(o.Cluster, o.Config.WithDefaults().SystemNamespace, nil)
		}
	}
	if o.HistoryPerService >= 0 {
		a.History = history.New(o.HistoryPerService)
		a.History.FollowPods(in.Pods)
	}
	a.Graph = graphs.Build(o.Config, in, opts)
	a.Served = source.New(a.Graph)
	problems.Watch(a.Graph.Problems)
	cfg := o.Config.WithDefaults()
	reg.MustRegister(outputs.NewCollector(a.Graph.Description))
	outputs.RegisterIstioRegistryMetrics(reg, a.Graph)
	if cfg.LRS {
		interval := o.LRSInterval
		if interval <= 0 {
			interval = 10 * time.Second
		}
		a.LoadReports = lrs.New(interval, reg, log.Named("lrs"))
	}
	var tokens admission.TokenAuthenticator
	var debugAuth func(*http.Request) (admission.Identity, error)
	if len(o.TokenAudiences) > 0 && o.Cluster != nil {
		tokens = admission.NewTokenCache(admission.KubeTokenReview{Client: o.Cluster.Kube(), Audiences: o.TokenAudiences, TrustDomain: cfg.TrustDomain})
		debugAuth = func(r *http.Request) (admission.Identity, error) {
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok {
				return admission.Identity{}, errors.New("no bearer token")
			}
			return tokens.Authenticate(r.Context(), strings.TrimSpace(tok))
		}
	}
	// The debug pages read the server, and istio.io/debug serves them over xDS: the server is
	// given a handler that reaches them once they are built, below.
	var pages http.Handler = http.NotFoundHandler()
	if a.History != nil {
		a.History.Follow(history.Inputs{ServiceEndpoints: a.Graph.ServiceEndpoints, CLAs: a.Graph.CLAs})
	}
	xo := xds.Options{
		ClusterID: cfg.ClusterID, TrustDomain: cfg.TrustDomain, Log: log.Named("xds"), Metrics: xds.NewMetrics(reg),
		Limits: o.Limits, LoadReports: a.LoadReports, Tokens: tokens, SystemNamespace: cfg.SystemNamespace,
		ControlPlaneID: outputs.ControlPlaneID(),
		DebugPages:     http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { pages.ServeHTTP(w, r) }),
	}
	if a.History != nil {
		xo.Delivered = func(d xds.Delivery) { a.History.Delivered(d.Cause, d.NodeID, d.Handed, d.Done, d.Error) }
	}
	a.XDS = xds.NewServer(a.Served, xo)
	a.XDS.Start(a.stop)
	if o.SecureListener != nil {
		if o.SecureTLS == nil {
			return fail(errors.New("app: a secure listener needs a TLS configuration"))
		}
		a.secure = xds.NewGRPCServer(ctx, a.XDS, credentials.NewTLS(o.SecureTLS), o.GRPCOptions...)
	}
	a.grpc = xds.NewGRPCServer(ctx, a.XDS, nil, o.GRPCOptions...)
	// The debug pages exist without a debug port too: istioctl reads them over xDS.
	var served http.Handler
	pages, served = a.debugMux(cfg, o, reg, debugAuth)
	if a.secure != nil {
		go func() {
			if err := a.secure.Serve(o.SecureListener); err != nil {
				log.Error("secure xDS server stopped", zap.Error(err))
			}
		}()
	}
	go func() {
		if err := a.grpc.Serve(o.XDSListener); err != nil {
			log.Error("xDS server stopped", zap.Error(err))
		}
	}()
	if o.DebugListener != nil {
		a.http = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: served}
		go func() {
			if err := a.http.Serve(o.DebugListener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("debug server stopped", zap.Error(err))
			}
		}()
	}

	go run()
	return a, nil
}

func (a *App) debugMux(cfg collections.Config, o Options, reg *prometheus.Registry, auth func(*http.Request) (admission.Identity, error)) (*http.ServeMux, http.Handler) {
	extra := map[string]outputs.DebugPage{
		"/debug/syncz": {Help: "per proxy: sent and acknowledged nonces per type, last NACK; ?namespace=", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			outputs.WriteJSON(w, r, a.XDS.Debug().Syncz(r.URL.Query().Get("namespace")))
		})},
		"/debug/loadz": {Help: "the load clients report (LRS, with --lrs): per cluster, locality and drop category, and the reporters", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if a.LoadReports == nil {
				http.Error(w, "load reporting is off (krteds serve --lrs turns it on)", http.StatusNotFound)
				return
			}
			outputs.WriteJSON(w, r, a.LoadReports.Loadz())
		})},
		"/debug/memz": {Help: "live heap by collection and structure, per endpoint and per proxy", Handler: outputs.MemoryPage(a.Served, a.XDS, a.grpcServers()...)},
	}
	maps.Copy(extra, outputs.ProxyPages(a.Served, a.XDS, a.History))
	var notes func() []string
	if a.Files != nil {
		extra["/debug/sources"] = outputs.DebugPage{Help: "the manifest files served: objects, and why a file is not applied", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			outputs.WriteJSON(w, r, a.Files.Status())
		})}
		notes = func() []string {
			var out []string
			for _, f := range a.Files.Skipped() {
				reason := "being written"
				if len(f.Problems) > 0 {
					reason = f.Problems[0].Reason + ": " + f.Problems[0].Detail
				}
				out = append(out, fmt.Sprintf("manifest %s not applied (%s)", f.Path, collections.Truncate(reason, 200)))
			}
			return out
		}
	}
	return outputs.NewDebugMux(outputs.DebugOptions{
		Graph: a.Graph, Debugger: a.Debugger, Gatherer: reg, ClusterID: cfg.ClusterID,
		AllowRemote: o.DebugAllowRemote, Ready: a.XDS.Serving, ReadyNotes: notes, Authenticate: auth, Scope: a.XDS.Debug().ScopeOf, Extra: extra,
	})
}

func (a *App) grpcServers() []any {
	out := []any{a.grpc}
	if a.secure != nil {
		out = append(out, a.secure)
	}
	return out
}

// Cluster is the Kubernetes client the graph reads, nil unless the source is a cluster.
func (a *App) Cluster() kube.Client { return a.cluster }

// DebugHandler is the debug server's handler (nil without a debug listener), for tests.
func (a *App) DebugHandler() http.Handler {
	if a.http == nil {
		return nil
	}
	return a.http.Handler
}

// WaitUntilSynced blocks until the graph has synced or stop is closed.
func (a *App) WaitUntilSynced(stop <-chan struct{}) bool { return a.Graph.WaitUntilSynced(stop) }

// Drain shuts krteds down as a replica of a Deployment should: it is not ready from now on
// (/ready answers 503), takes no new connection or stream and tells its clients' connections to
// go (GOAWAY), ends its streams spread over d (each client reconnects to another replica), then
// stops.
func (a *App) Drain(d time.Duration) {
	a.XDS.Close()
	for _, gs := range []*grpc.Server{a.grpc, a.secure} {
		if gs != nil {
			go gs.GracefulStop()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d+5*time.Second)
	defer cancel()
	a.XDS.Drain(ctx, d)
	a.Stop()
}

// Stop closes every stream and server and stops the graph and the source; later calls do nothing.
func (a *App) Stop() { a.stopOnce.Do(a.shutdown) }

func (a *App) shutdown() {
	// Envoy holds xDS streams open forever: stop them rather than wait for them.
	a.grpc.Stop()
	if a.secure != nil {
		a.secure.Stop()
	}
	if a.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = a.http.Shutdown(ctx)
	}
	a.close()
	close(a.stop)
}
