package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/kube"
	istiolog "istio.io/istio/pkg/log"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs"
	"github.com/krteds/krteds/outputs/xds"
)

type serveOptions struct {
	kubeconfig       string
	manifests        string
	xdsAddr          string
	xdsTLSAddr       string
	tlsCert, tlsKey  string
	tlsClientCA      string
	jwtAudiences     []string
	debugAddr        string
	debugAllowRemote bool
	logLevel         string
	cfg              collections.Config
}

func newServeCommand() *cobra.Command {
	o := &serveOptions{cfg: collections.DefaultConfig()}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Watch Kubernetes (or a folder of manifests) and serve xDS",
		Long: `serve watches Services, Pods, Nodes, Namespaces and EndpointSlices (and DestinationRules
and Sidecars where their CRDs exist) and serves the endpoints istiod would serve. With --manifests it reads a YAML file or folder instead of a
cluster; otherwise it uses --kubeconfig, $KUBECONFIG, ~/.kube/config or the in-cluster config.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd.Context(), o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: in-cluster, else $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.manifests, "manifests", "", "serve the Kubernetes objects in this YAML file or folder instead of a cluster")
	f.StringVar(&o.xdsAddr, "xds-addr", "127.0.0.1:15010", "address of the plaintext, unauthenticated xDS (ADS) gRPC server; loopback unless opened, e.g. :15010")
	f.StringVar(&o.xdsTLSAddr, "xds-tls-addr", ":15012", "address of the authenticated xDS server (used when --tls-cert, --tls-key and --tls-client-ca are set)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "serving certificate (PEM) of the authenticated xDS server")
	f.StringVar(&o.tlsKey, "tls-key", "", "private key (PEM) of --tls-cert")
	f.StringSliceVar(&o.jwtAudiences, "jwt-audience", []string{"istio-ca"}, "audiences a service-account token presented on the TLS port must carry (checked with TokenReview; not with --manifests)")
	f.StringVar(&o.tlsClientCA, "tls-client-ca", "", "CA bundle (PEM) that client certificates must chain to; each client's SPIFFE identity must match the namespace its node claims")
	f.StringVar(&o.debugAddr, "debug-addr", ":15014", "address of the debug, metrics and readiness HTTP server")
	f.BoolVar(&o.debugAllowRemote, "debug-allow-remote", false, "serve /debug/* to non-loopback clients too")
	f.StringVar(&o.cfg.Domain, "domain", o.cfg.Domain, "cluster DNS domain")
	f.StringVar(&o.cfg.ClusterID, "cluster-id", o.cfg.ClusterID, "cluster ID of this registry")
	f.StringVar(&o.cfg.TrustDomain, "trust-domain", o.cfg.TrustDomain, "SPIFFE trust domain of workload identities")
	f.StringVar(&o.cfg.SystemNamespace, "system-namespace", o.cfg.SystemNamespace, "namespace whose topology.istio.io/network label is the default network")
	f.StringVar(&o.logLevel, "log-level", "info", "log level (debug, info, warn, error), optionally per scope: info,xds=debug,kube=debug")
	return cmd
}

func newLogger(spec string) (*zap.Logger, error) {
	levels, err := outputs.ParseLogLevels(spec)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	// The kube client and krt log through Istio's logger; keep them quiet unless debugging.
	io := istiolog.DefaultOptions()
	io.OutputPaths = []string{"stderr"}
	istioLevel := istiolog.WarnLevel
	if levels.Enabled("kube", zapcore.DebugLevel) {
		istioLevel = istiolog.InfoLevel
	}
	io.SetDefaultOutputLevel(istiolog.OverrideScopeName, istioLevel)
	if err := istiolog.Configure(io); err != nil {
		return nil, fmt.Errorf("configuring logs: %w", err)
	}
	return outputs.NewLogger(levels), nil
}

func runServe(ctx context.Context, o *serveOptions) error {
	log, err := newLogger(o.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()

	ctx, cancel := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer cancel()
	client, source, err := buildClient(ctx, o, log)
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	xdsLis, err := net.Listen("tcp", o.xdsAddr)
	if err != nil {
		return fmt.Errorf("xDS server: %w", err)
	}
	debugLis, err := net.Listen("tcp", o.debugAddr)
	if err != nil {
		return fmt.Errorf("debug server: %w", err)
	}
	opts := outputs.AppOptions{
		Config: o.cfg, Client: client, XDSListener: xdsLis, DebugListener: debugLis,
		DebugAllowRemote: o.debugAllowRemote, Log: log, Registry: reg,
	}
	if o.tlsCert != "" || o.tlsKey != "" || o.tlsClientCA != "" {
		if o.tlsCert == "" || o.tlsKey == "" || o.tlsClientCA == "" {
			return fmt.Errorf("--tls-cert, --tls-key and --tls-client-ca go together")
		}
		// Against a cluster, clients may authenticate with a service-account token instead of a
		// certificate; manifests have no TokenReview API.
		opts.TokenAudiences = o.jwtAudiences
		if o.manifests != "" {
			opts.TokenAudiences = nil
		}
		if opts.SecureTLS, err = xds.ServerTLS(o.tlsCert, o.tlsKey, o.tlsClientCA, len(opts.TokenAudiences) == 0); err != nil {
			return err
		}
		if opts.SecureListener, err = net.Listen("tcp", o.xdsTLSAddr); err != nil {
			return fmt.Errorf("authenticated xDS server: %w", err)
		}
	}
	app, err := outputs.StartApp(opts)
	if err != nil {
		return err
	}
	defer app.Stop()

	start := time.Now()
	if !app.WaitUntilSynced(ctx.Done()) {
		return nil
	}
	g := app.Graph
	log.Info("graph synced", zap.String("source", source), zap.Duration("took", time.Since(start)),
		zap.Int("services", len(g.ServiceInfos.List())), zap.Int("endpointSlices", len(g.SliceEndpoints.List())),
		zap.String("xds", xdsLis.Addr().String()), zap.String("debug", debugLis.Addr().String()))

	<-ctx.Done()
	log.Info("shutting down")
	return nil
}

// buildClient returns a kube client over the manifests, or over a real cluster.
func buildClient(ctx context.Context, o *serveOptions, log *zap.Logger) (kube.Client, string, error) {
	if o.manifests != "" {
		src, docErrs, err := collections.NewManifestSource(o.manifests)
		if err != nil {
			return nil, "", err
		}
		for _, e := range docErrs {
			log.Warn("skipped manifest document", zap.Error(e))
		}
		log.Info("loaded manifests", zap.String("path", o.manifests))
		go src.Watch(ctx.Done(), 250*time.Millisecond, func(st collections.ReloadStats, errs []error, err error) {
			if err != nil {
				log.Error("reloading manifests", zap.Error(err))
				return
			}
			for _, e := range errs {
				log.Warn("skipped manifest document", zap.Error(e))
			}
			if st.Changed() {
				log.Info("manifests reloaded", zap.Int("created", st.Created), zap.Int("updated", st.Updated), zap.Int("deleted", st.Deleted))
			}
		})
		return src.Client(), "manifests " + o.manifests, nil
	}
	rc, err := kube.DefaultRestConfig(o.kubeconfig, "")
	if err != nil {
		return nil, "", noCluster(err)
	}
	client, err := kube.NewClient(kube.NewClientConfigForRestConfig(rc), cluster.ID(o.cfg.ClusterID))
	if err != nil {
		return nil, "", noCluster(err)
	}
	vctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := client.Kube().Discovery().RESTClient().Get().AbsPath("/version").Do(vctx).Raw(); err != nil {
		return nil, "", noCluster(err)
	}
	return client, "cluster " + rc.Host, nil
}

func noCluster(err error) error {
	return fmt.Errorf("no Kubernetes cluster reachable (%v); to try krteds without one, run: krteds serve --manifests examples/mesh", err)
}
