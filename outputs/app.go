package outputs

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/krt"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/graphs"
	"github.com/krteds/krteds/outputs/xds"
)

// AppOptions configures a running krteds.
type AppOptions struct {
	Config collections.Config
	// Client is the source of Kubernetes objects: a real cluster or a manifest-seeded fake.
	Client kube.Client
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
	// service-account token for one of these audiences (checked with TokenReview).
	TokenAudiences []string
}

// App is krteds assembled: the graph, the xDS server and the debug server, all running.
type App struct {
	Graph    *graphs.Graph
	XDS      *xds.Server
	Debugger *krt.DebugHandler
	Registry *prometheus.Registry

	client kube.Client
	stop   chan struct{}
	grpc   *grpc.Server
	secure *grpc.Server
	http   *http.Server
	log    *zap.Logger
	ctx    context.Context
	close  context.CancelFunc
}

// StartApp builds the graph over the client, starts serving and runs the client's informers.
// Serving starts at once; xDS responses wait until the graph has synced.
func StartApp(o AppOptions) (*App, error) {
	if o.Client == nil || o.XDSListener == nil {
		return nil, errors.New("StartApp: a client and an xDS listener are required")
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &App{Debugger: new(krt.DebugHandler), Registry: reg, client: o.Client, stop: make(chan struct{}), log: log, ctx: ctx, close: cancel}
	opts := krt.NewOptionsBuilder(a.stop, "", a.Debugger)
	a.Graph = graphs.Build(o.Config, collections.InformerInputs(o.Client, opts), opts, NewProblemReporter(log.Named("registry"), reg))
	cfg := o.Config.WithDefaults()
	a.XDS = xds.NewServer(a.Graph, cfg.ClusterID, log.Named("xds"), xds.NewMetrics(reg))
	reg.MustRegister(graphs.NewCollector(a.Graph.Graph))
	a.XDS.SetTrustDomain(cfg.TrustDomain)
	var debugAuth func(*http.Request) error
	if len(o.TokenAudiences) > 0 {
		tr := xds.KubeTokenReview{Client: o.Client.Kube(), Audiences: o.TokenAudiences, TrustDomain: cfg.TrustDomain}
		a.XDS.SetTokenAuthenticator(tr)
		debugAuth = func(r *http.Request) error {
			tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok {
				return errors.New("no bearer token")
			}
			_, err := tr.Authenticate(r.Context(), strings.TrimSpace(tok))
			return err
		}
	}
	a.XDS.Start(a.stop)
	if o.SecureListener != nil {
		if o.SecureTLS == nil {
			cancel()
			return nil, errors.New("StartApp: a secure listener needs a TLS configuration")
		}
		a.secure = xds.NewGRPCServer(ctx, a.XDS, append([]grpc.ServerOption{grpc.Creds(credentials.NewTLS(o.SecureTLS))}, o.GRPCOptions...)...)
		go func() {
			if err := a.secure.Serve(o.SecureListener); err != nil {
				log.Error("secure xDS server stopped", zap.Error(err))
			}
		}()
	}
	a.grpc = xds.NewGRPCServer(ctx, a.XDS, o.GRPCOptions...)
	go func() {
		if err := a.grpc.Serve(o.XDSListener); err != nil {
			log.Error("xDS server stopped", zap.Error(err))
		}
	}()
	if o.DebugListener != nil {
		a.http = &http.Server{
			ReadHeaderTimeout: 10 * time.Second,
			Handler: NewDebugMux(DebugOptions{
				Graph: a.Graph.EDSGraph, Debugger: a.Debugger, Gatherer: reg, ClusterID: cfg.ClusterID,
				AllowRemote: o.DebugAllowRemote, Ready: a.XDS.Synced, Authenticate: debugAuth,
				Extra: map[string]DebugPage{
					"/debug/syncz": {Help: "per proxy: sent and acknowledged nonces per type, last NACK; ?namespace=", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						writeJSON(w, r, a.XDS.Syncz(r.URL.Query().Get("namespace")))
					})},
					"/debug/adsz": {Help: "connected xDS clients, their class and what they watch", Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						writeJSON(w, r, a.XDS.Adsz())
					})},
				},
			}),
		}
		go func() {
			if err := a.http.Serve(o.DebugListener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("debug server stopped", zap.Error(err))
			}
		}()
	}
	for kind, gvr := range map[string]schema.GroupVersionResource{"DestinationRule": collections.GVRDestinationRule, "Sidecar": collections.GVRSidecar} {
		if !collections.CRDInstalled(o.Client, gvr, func() { log.Info("CRD installed; reading it", zap.String("kind", kind)) }) {
			log.Info("CRD not installed; the collection stays empty until it is", zap.String("kind", kind), zap.String("resource", gvr.String()))
		}
	}
	go o.Client.RunAndWait(a.stop)
	return a, nil
}

// Client is the Kubernetes client the graph reads.
func (a *App) Client() kube.Client { return a.client }

// DebugHandler is the debug server's handler (nil without a debug listener), for tests.
func (a *App) DebugHandler() http.Handler {
	if a.http == nil {
		return nil
	}
	return a.http.Handler
}

// WaitUntilSynced blocks until the graph has synced or stop is closed.
func (a *App) WaitUntilSynced(stop <-chan struct{}) bool { return a.Graph.WaitUntilSynced(stop) }

// Stop closes every stream and server and stops the graph.
func (a *App) Stop() {
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
